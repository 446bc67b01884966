// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {LLMChainAccess} from "./LLMChainAccess.sol";

/// @title LLMChain Identity contract (ISC)
/// @notice Registers each account once, records when (the start of a user's first `D` in the
///         Reputation contract) and grants its role through the Access Control contract.
/// @dev    Needs `access.setIdentity(address(this))` (admin, once) before `register` works.
contract Identity {
    struct Registration {
        uint64 at; // block.timestamp of the registration; 0 = not registered
        uint8 role; // role code given at registration
        bool registered;
    }

    bytes32 public constant REGISTRAR_ROLE = keccak256("REGISTRAR_ROLE");
    uint8 public constant CODE_USER = 1;
    uint8 public constant CODE_DEVELOPER = 2;

    LLMChainAccess public immutable access;

    mapping(address => Registration) private _registrations;

    error Unauthorized(bytes32 role, address account);
    error ZeroAddress();
    error AlreadyRegistered(address account);
    error UnknownRoleCode(uint8 code);
    error RoleNotRegistrable(uint8 code);

    event Registered(address indexed account, uint8 role, string profileCid, uint64 at);

    constructor(LLMChainAccess access_) {
        if (address(access_) == address(0)) revert ZeroAddress();
        access = access_;
    }

    /// @notice Registers `account` as a user (code 1) or a developer (code 2, who is a user too):
    ///         USER_ROLE, and DEVELOPER_ROLE for a developer. REGISTRAR_ROLE only; once per account.
    ///         The operator roles (oracle, registrar) and the expert role are not given here: only
    ///         the admin grants them, on the Access Control contract.
    function register(address account, uint8 role, string calldata profileCid) external {
        if (!access.hasRole(REGISTRAR_ROLE, msg.sender)) revert Unauthorized(REGISTRAR_ROLE, msg.sender);
        if (account == address(0)) revert ZeroAddress();
        if (role == 0 || role > 5) revert UnknownRoleCode(role);
        if (role != CODE_USER && role != CODE_DEVELOPER) revert RoleNotRegistrable(role);
        Registration storage reg = _registrations[account];
        if (reg.registered) revert AlreadyRegistered(account);
        uint64 at = uint64(block.timestamp);
        reg.at = at;
        reg.role = role;
        reg.registered = true;
        access.grantRoleFromIdentity(account, CODE_USER);
        if (role == CODE_DEVELOPER) access.grantRoleFromIdentity(account, CODE_DEVELOPER);
        emit Registered(account, role, profileCid, at);
    }

    function isRegistered(address account) external view returns (bool) {
        return _registrations[account].registered;
    }

    function registeredAt(address account) external view returns (uint64) {
        return _registrations[account].at;
    }

    /// @notice The role code given at registration (0 when not registered).
    function registeredRole(address account) external view returns (uint8) {
        return _registrations[account].role;
    }
}
