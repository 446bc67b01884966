// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {AccessControl} from "@openzeppelin/contracts/access/AccessControl.sol";

/// @title LLMChain Access Control contract (ACSC)
/// @notice Holds every role of LLMChain on OpenZeppelin's AccessControl. The deployer (`admin`)
///         gets DEFAULT_ADMIN_ROLE and REGISTRAR_ROLE. The admin role administers every other
///         role, so later roles are granted and revoked with the usual `grantRole`/`revokeRole`.
/// @dev    Least-privilege wiring with the Identity contract: the admin names the Identity
///         contract once (`setIdentity`); from then on that contract, and only it, may call
///         `grantRoleFromIdentity`, which grants one of the five coded roles (never the admin
///         role, and it can revoke nothing). Identity itself checks that its caller holds
///         REGISTRAR_ROLE here before it calls in.
contract LLMChainAccess is AccessControl {
    bytes32 public constant REGISTRAR_ROLE = keccak256("REGISTRAR_ROLE");
    bytes32 public constant DEVELOPER_ROLE = keccak256("DEVELOPER_ROLE");
    bytes32 public constant ORACLE_ROLE = keccak256("ORACLE_ROLE");
    bytes32 public constant USER_ROLE = keccak256("USER_ROLE");
    bytes32 public constant EXPERT_ROLE = keccak256("EXPERT_ROLE");

    /// Role codes taken by functions with a `uint8 role` argument.
    uint8 public constant CODE_USER = 1;
    uint8 public constant CODE_DEVELOPER = 2;
    uint8 public constant CODE_ORACLE = 3;
    uint8 public constant CODE_EXPERT = 4;
    uint8 public constant CODE_REGISTRAR = 5;

    /// The Identity contract allowed to grant coded roles on registration (zero until set).
    address public identity;

    error ZeroAddress();
    error IdentityAlreadySet(address identity);
    error NotIdentity(address caller);
    error UnknownRoleCode(uint8 code);

    event IdentitySet(address indexed identity);

    constructor(address admin) {
        if (admin == address(0)) revert ZeroAddress();
        _grantRole(DEFAULT_ADMIN_ROLE, admin);
        _grantRole(REGISTRAR_ROLE, admin);
    }

    /// @notice The role of a role code: 1 user, 2 developer, 3 oracle, 4 expert, 5 registrar.
    function roleFor(uint8 code) public pure returns (bytes32) {
        if (code == CODE_USER) return USER_ROLE;
        if (code == CODE_DEVELOPER) return DEVELOPER_ROLE;
        if (code == CODE_ORACLE) return ORACLE_ROLE;
        if (code == CODE_EXPERT) return EXPERT_ROLE;
        if (code == CODE_REGISTRAR) return REGISTRAR_ROLE;
        revert UnknownRoleCode(code);
    }

    /// @notice Names the Identity contract; admin only, once.
    function setIdentity(address identity_) external onlyRole(DEFAULT_ADMIN_ROLE) {
        if (identity_ == address(0)) revert ZeroAddress();
        if (identity != address(0)) revert IdentityAlreadySet(identity);
        identity = identity_;
        emit IdentitySet(identity_);
    }

    /// @notice Grants the role of `code` to `account`; callable by the Identity contract only.
    /// @return granted false when the account already held the role.
    function grantRoleFromIdentity(address account, uint8 code) external returns (bool granted) {
        if (msg.sender != identity) revert NotIdentity(msg.sender);
        return _grantRole(roleFor(code), account);
    }
}
