"""Linking a wallet: a user proves they hold an address's key by signing a sign-in
message (EIP-4361) in their wallet, through the browser's standard wallet interface (EIP-1193,
`personal_sign`); the registrar then registers that address, and from then on the oracle names it as
the user of their new answers, whose ratings their wallet signs (`eth_signTypedData_v4`): the site
never sees that key and cannot sign for them.

The message is the site's own: issued here with a single-use nonce, kept in the session for ten
minutes, and accepted only back exactly as issued, signed by the address it names.
"""

from __future__ import annotations

import secrets
from datetime import timedelta

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone
from eth_account import Account
from eth_account.messages import encode_defunct
from eth_utils import is_address, to_checksum_address

from apps.chain import outbox, relay
from apps.chain.keys import admin_address
from apps.chain.models import SigningKey

from .models import Profile

SESSION_KEY = "wallet-link"
VALID_FOR = timedelta(minutes=10)
STATEMENT = ("Link this wallet to my LLMChain account. From now on my ratings are signed by this wallet; "
             "the site cannot sign them for me.")


def challenge(session, *, user, address: str, domain: str, uri: str) -> str:
    """The sign-in message for `address` (EIP-4361), remembered in the session until it is used."""
    if not isinstance(address, str) or not is_address(address):
        raise ValidationError({"wallet": ["Your wallet did not give an Ethereum address."]})
    _check_free(user, to_checksum_address(address))
    dep = relay.deployment()
    issued = timezone.now()
    nonce = secrets.token_hex(8)
    message = (f"{domain} wants you to sign in with your Ethereum account:\n{to_checksum_address(address)}\n\n"
               f"{STATEMENT}\n\nURI: {uri}\nVersion: 1\nChain ID: {dep.chainId if dep else 0}\nNonce: {nonce}\n"
               f"Issued At: {issued.strftime('%Y-%m-%dT%H:%M:%SZ')}\n"
               f"Expiration Time: {(issued + VALID_FOR).strftime('%Y-%m-%dT%H:%M:%SZ')}")
    session[SESSION_KEY] = {"message": message, "address": to_checksum_address(address),
                            "expires": (issued + VALID_FOR).timestamp()}
    return message


def _check_free(user, address: str) -> None:
    if SigningKey.objects.filter(address=address).exists():
        raise ValidationError({"wallet": ["This address's key is held by this site: link a wallet whose key only "
                                          "you hold."]})
    if Profile.objects.filter(wallet_address=address).exclude(user=user).exists() or Profile.objects.filter(
            address=address).exists():
        raise ValidationError({"wallet": ["This wallet is linked to another account already."]})


def link(session, user, message: str, signature: str) -> Profile:
    """Check the signed sign-in message and link its address; queue the address's registration as a
    user. ValidationError, nothing changed, when anything is off."""
    message = (message or "").replace("\r\n", "\n")  # a browser's form data sends line breaks as CRLF
    pending = session.get(SESSION_KEY)
    if not pending or pending["expires"] < timezone.now().timestamp():
        raise ValidationError({"wallet": ["The sign-in message expired: start again."]})
    if message != pending["message"]:
        raise ValidationError({"wallet": ["This is not the message this site asked you to sign."]})
    try:
        signer = Account.recover_message(encode_defunct(text=message), signature=signature)
    except Exception as exc:  # noqa: BLE001 - any malformed signature is the same refusal
        raise ValidationError({"wallet": ["The signature could not be read."]}) from exc
    if signer != pending["address"]:
        raise ValidationError({"wallet": ["The message was signed by another address than the one it names."]})
    profile = Profile.objects.get(user=user)
    if profile.wallet_address:
        raise ValidationError({"wallet": [f"Your account is linked to {profile.wallet_address} already."]})
    _check_free(user, signer)
    try:
        with transaction.atomic():
            Profile.objects.filter(pk=profile.pk).update(wallet_address=signer, wallet_linked_at=timezone.now())
            outbox.enqueue("register", admin_address(), {"account": signer, "role": "user"})
    except IntegrityError as exc:
        raise ValidationError({"wallet": ["This wallet is linked to another account already."]}) from exc
    session.pop(SESSION_KEY, None)
    profile.refresh_from_db()
    return profile
