// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ERC2771Forwarder} from "@openzeppelin/contracts/metatx/ERC2771Forwarder.sol";

/// @title The forwarder the Reputation contract trusts (ERC-2771)
/// @notice OpenZeppelin's ERC2771Forwarder as it is, under the EIP-712 domain ("LLMChain", "1"):
///         a relayer submits `ForwardRequest`s signed by their senders (a rater's humEval, anyone's
///         updateReputation), one at a time or many in one `executeBatch`. Each request carries
///         its sender's nonce and a deadline, so a replay or a stale request fails.
contract Forwarder is ERC2771Forwarder {
    constructor() ERC2771Forwarder("LLMChain") {}
}
