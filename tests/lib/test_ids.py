import pytest

from lib.ids import b32, hex32, is_hex32

ID = "0x" + "ab" * 32


def test_an_id_goes_to_32_bytes_and_back_in_lowercase():
    assert b32(ID) == bytes.fromhex("ab" * 32) == b32(ID[2:]) == b32(b32(ID))
    assert hex32(b32(ID.upper().replace("0X", "0x"))) == ID


def test_anything_but_32_bytes_is_refused():
    with pytest.raises(ValueError):
        b32("0x" + "ab" * 31)
    with pytest.raises(ValueError):
        b32(b"\x00" * 33)


def test_only_0x_and_64_hex_digits_is_an_id():
    assert is_hex32(ID) and is_hex32(ID.upper().replace("0X", "0x"))
    for bad in (ID[2:], ID + "0", ID[:-1], ID + "\n", "0x" + "zz" * 32, None, b32(ID)):
        assert not is_hex32(bad)
