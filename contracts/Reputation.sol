// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ERC2771Context} from "@openzeppelin/contracts/metatx/ERC2771Context.sol";
import {LLMChainAccess} from "./LLMChainAccess.sol";
import {Identity} from "./Identity.sol";

/// @title LLMChain Reputation contract (RSC)
/// @notice The reputation model of the LLMChain paper (Sec. IV, spec REPUTATION.md) in 1e18 fixed
///         point. Every integer operation, truncation and ordering mirrors `lib/reputation.py`
///         (`ReputationModel`) exactly, so that the contract and the mirror agree to the wei.
/// @dev    Gas per evaluation is O(1): each context keeps running sums (n, sumRa, sumRh, sumR),
///         so a mean is one division. Roles are read from the Access Control contract; user
///         registration times from the Identity contract. The contract needs no role itself.
///         Calls may come directly or through the trusted ERC-2771 forwarder (OpenZeppelin's
///         ERC2771Forwarder, set at deployment): a relayer submits requests their senders signed
///         (EIP-712), and every sender check reads `_msgSender()`, the request's signer.
///         Arena battles (two anonymous answers to one prompt) are attested by the oracle and
///         voted on by their user; they are recorded, and move no reputation.
contract Reputation is ERC2771Context {
    // ------------------------------------------------------------------------------------
    // Constants (Table I of the paper; the same names as lib/reputation.py)
    // ------------------------------------------------------------------------------------
    uint256 internal constant WAD = 1e18;
    uint256 internal constant HALF = WAD / 2;
    uint256 internal constant PSI_THIRDS = 1; // psi = 1/3: rate for a good answer (S >= threshold)
    uint256 internal constant XI_THIRDS = 2; // xi = 2/3: rate for a bad answer
    // lambda, the time constant of F_D, per minute (1e18 fixed point) is fixed at deployment
    // (lambdaWad); the paper's 1e-3 is 1e15. Bounded so that lambda * D (D <= one day) keeps the
    // series of expWad exact enough and far from overflow.
    uint256 internal constant MIN_LAMBDA_WAD = 1e12; // 1e-6 per minute
    uint256 internal constant MAX_LAMBDA_WAD = 3e16; // 0.03 per minute
    uint256 internal constant D_CAP_MINUTES = 1440; // the paper's daily reset
    uint256 internal constant EXP_MAX_TERMS = 48;

    bytes32 public constant GLOBAL_CONTEXT = bytes32(0);

    bytes32 internal constant DEFAULT_ADMIN_ROLE = 0x00;
    bytes32 internal constant DEVELOPER_ROLE = keccak256("DEVELOPER_ROLE");
    bytes32 internal constant ORACLE_ROLE = keccak256("ORACLE_ROLE");
    bytes32 internal constant USER_ROLE = keccak256("USER_ROLE");

    // ------------------------------------------------------------------------------------
    // Storage
    // ------------------------------------------------------------------------------------
    /// Running sums of one context over the models holding a REP there.
    struct Context {
        // slot 0
        uint128 sumRa;
        uint128 sumRh;
        // slot 1
        uint128 sumR;
        uint64 n; // models holding a REP in the context
        uint32 index; // 0 for the global context
        bool exists;
    }

    struct Model {
        address owner; // zero = unknown model
        uint32 index; // 1-based
    }

    struct Interaction {
        // slot 0
        address user; // zero = unknown interaction (a registered user is never zero)
        uint32 modelIndex;
        uint32 contextIndex;
        bool hasReference;
        bool humanDone;
        bool reputationDone;
        // The user owns the model (a model's owner never changes): its humEval is refused. Kept here,
        // where autoEval reads the owner anyway, so that humEval and openBattle need no extra read.
        bool byOwner;
        // slot 1 (all <= 1e18 < 2^64)
        uint64 sA;
        uint64 wA;
        uint64 sH;
        uint64 wH;
        // slot 2
        bytes32 evidenceHash; // keccak256(bytes(evidenceCid)); the CID itself is in AutoEvaluated
    }

    /// Unpacked REP of a (model, context) pair. Stored as one word:
    /// ra [0,64) | rh [64,128) | r [128,192) | nAuto [192,224) | nHuman [224,255) | exists bit 255.
    struct Rep {
        uint256 ra;
        uint256 rh;
        uint256 r;
        uint256 nAuto;
        uint256 nHuman;
        bool exists;
    }

    /// An arena battle: two interactions of one user in one context, by two models. The models,
    /// the context and the user are the interactions'; the user is kept to check a vote in one read.
    struct Battle {
        // slot 0, 1
        bytes32 interactionA;
        bytes32 interactionB;
        // slot 2
        address user; // zero = unknown battle
        bool voided; // an answer named its own model: a vote is recorded, not counted
        uint8 outcome; // 0 = no vote yet, else OUTCOME_A_BETTER..OUTCOME_BOTH_BAD
        uint8 ownSide; // 0, or which side's model (1 = A, 2 = B) the user owns: their vote is refused
    }

    uint8 internal constant OUTCOME_A_BETTER = 1;
    uint8 internal constant OUTCOME_B_BETTER = 2;
    uint8 internal constant OUTCOME_TIE = 3;
    uint8 internal constant OUTCOME_BOTH_BAD = 4;

    uint256 private constant MASK64 = type(uint64).max;
    uint256 private constant MAX_N_AUTO = type(uint32).max;
    uint256 private constant MAX_N_HUMAN = (1 << 31) - 1;
    uint256 private constant EXISTS_BIT = 1 << 255;

    LLMChainAccess public immutable access;
    Identity public immutable identity;
    /// lambda of F_D per minute, 1e18 fixed point (1e15 = the paper's 1e-3), set at deployment.
    uint256 public immutable lambdaWad;

    mapping(bytes32 modelId => mapping(bytes32 contextId => uint256 word)) private _reps;
    mapping(bytes32 contextId => Context) private _contexts;
    mapping(uint32 index => bytes32 contextId) private _contextIdAt;
    mapping(bytes32 modelId => Model) private _models;
    mapping(uint32 index => bytes32 modelId) private _modelIdAt;
    mapping(bytes32 interactionId => Interaction) private _interactions;
    mapping(address user => uint64 timestamp) private _lastHumanEvalAt;

    /// Number of contexts, the global one included.
    uint32 public contextCount;
    /// Number of models.
    uint32 public modelCount;

    mapping(bytes32 battleId => Battle) private _battles;
    mapping(bytes32 interactionId => bytes32 battleId) private _battleOf; // zero = in no battle

    // ------------------------------------------------------------------------------------
    // Errors
    // ------------------------------------------------------------------------------------
    error Unauthorized(bytes32 role, address account);
    error ZeroAddress();
    error BadLambda(uint256 lambdaWad); // outside [1e12, 3e16] (1e-6 to 0.03 per minute)
    error LengthMismatch();
    error ContextExists(bytes32 contextId);
    error ModelExists(bytes32 modelId);
    error InteractionExists(bytes32 interactionId);
    error UnknownContext(bytes32 contextId);
    error UnknownModel(bytes32 modelId);
    error UnknownInteraction(bytes32 interactionId);
    error UserNotRegistered(address user);
    error NotAUser(address account); // registered, but without USER_ROLE (never had it, or suspended)
    error ScoreOutOfRange();
    error AnswerOutOfRange();
    error NotInteractionUser();
    error AlreadyEvaluated();
    error NoHumanEvaluation();
    error AlreadyUpdated();
    error CounterOverflow();
    error NotModelOwner(bytes32 modelId, address account);
    error EmptyCid();
    error ZeroBattleId(); // 0 is battleOf's "in no battle"
    error BattleExists(bytes32 battleId);
    error SameInteraction(bytes32 interactionId);
    error DifferentUsers(address userA, address userB);
    error DifferentContexts(bytes32 contextA, bytes32 contextB);
    error SameModel(bytes32 modelId);
    error InteractionInBattle(bytes32 interactionId, bytes32 battleId);
    error UnknownBattle(bytes32 battleId);
    error NotBattleUser();
    error AlreadyVoted();
    error OutcomeOutOfRange();
    error OwnModel(bytes32 modelId, address account); // an owner neither rates nor votes on their own model

    // ------------------------------------------------------------------------------------
    // Events (an indexer rebuilds every score from these alone)
    // ------------------------------------------------------------------------------------
    event ContextAdded(bytes32 indexed contextId, string name);
    event ModelAdded(bytes32 indexed modelId, address indexed owner, string metadataCid);
    /// A model's new metadata (IPFS CID), published by its owner; the latest one is current.
    event ModelMetadataUpdated(bytes32 indexed modelId, string metadataCid);
    event AutoEvaluated(
        bytes32 indexed interactionId,
        bytes32 indexed modelId,
        bytes32 indexed contextId,
        address user,
        bool hasReference,
        uint256 sA,
        uint256 wA,
        string evidenceCid
    );
    event HumanEvaluated(
        bytes32 indexed interactionId, address indexed user, uint256 sH, uint256 wH, uint256 dMinutes
    );
    /// The new full state of the REP of (modelId, contextId), each time it is created or changes.
    event ReputationUpdated(
        bytes32 indexed interactionId,
        bytes32 indexed modelId,
        bytes32 indexed contextId,
        uint256 rA,
        uint256 rH,
        uint256 r,
        uint64 nAuto,
        uint64 nHuman
    );
    /// An arena battle the oracle attests: two answers of two models to one prompt of `user`.
    event BattleOpened(
        bytes32 indexed battleId,
        bytes32 indexed contextId,
        bytes32 modelA,
        bytes32 modelB,
        bytes32 interactionA,
        bytes32 interactionB,
        address user,
        bool voided
    );
    /// The user's vote on a battle; `counted` is false when the battle is voided.
    event Voted(bytes32 indexed battleId, address indexed user, uint8 outcome, bool counted);

    constructor(LLMChainAccess access_, Identity identity_, address trustedForwarder_, uint256 lambdaWad_)
        ERC2771Context(trustedForwarder_)
    {
        if (address(access_) == address(0) || address(identity_) == address(0)) revert ZeroAddress();
        if (lambdaWad_ < MIN_LAMBDA_WAD || lambdaWad_ > MAX_LAMBDA_WAD) revert BadLambda(lambdaWad_);
        lambdaWad = lambdaWad_;
        access = access_;
        identity = identity_;
        Context storage g = _contexts[GLOBAL_CONTEXT];
        g.exists = true; // index 0
        contextCount = 1;
        emit ContextAdded(GLOBAL_CONTEXT, "global");
    }

    modifier onlyRole(bytes32 role) {
        _checkRole(role);
        _;
    }

    // ------------------------------------------------------------------------------------
    // Set-up
    // ------------------------------------------------------------------------------------
    /// @notice Adds a context; admin only. The id must be new and non-zero (0 is the global context).
    function addContext(bytes32 contextId, string calldata name) external onlyRole(DEFAULT_ADMIN_ROLE) {
        Context storage c = _contexts[contextId];
        if (c.exists) revert ContextExists(contextId); // includes the global context 0
        uint32 index = contextCount;
        c.exists = true;
        c.index = index;
        _contextIdAt[index] = contextId;
        contextCount = index + 1;
        emit ContextAdded(contextId, name);
    }

    /// @notice Adds a model owned by the caller; DEVELOPER_ROLE only. Reverts on a duplicate id
    ///         and on an empty metadata CID.
    function addModel(bytes32 modelId, string calldata metadataCid) external onlyRole(DEVELOPER_ROLE) {
        _addModel(modelId, metadataCid);
    }

    /// @notice `addModel` for many models, all or nothing.
    function addModelBatch(bytes32[] calldata modelIds, string[] calldata metadataCids)
        external
        onlyRole(DEVELOPER_ROLE)
    {
        if (modelIds.length != metadataCids.length) revert LengthMismatch();
        for (uint256 i = 0; i < modelIds.length; ++i) {
            _addModel(modelIds[i], metadataCids[i]);
        }
    }

    /// @notice Publishes new metadata (an IPFS CID) for a model; its owner only (no role needed,
    ///         like `humEval`). The model keeps its id and scores. The CID is not stored: the
    ///         `ModelMetadataUpdated` event is the record, and the latest one is current.
    function updateModelMetadata(bytes32 modelId, string calldata metadataCid) external {
        address owner = _models[modelId].owner;
        if (owner == address(0)) revert UnknownModel(modelId);
        if (_msgSender() != owner) revert NotModelOwner(modelId, _msgSender());
        if (bytes(metadataCid).length == 0) revert EmptyCid();
        emit ModelMetadataUpdated(modelId, metadataCid);
    }

    // ------------------------------------------------------------------------------------
    // Evaluations
    // ------------------------------------------------------------------------------------
    /// @notice Records the automatic part of an interaction; ORACLE_ROLE only. Creates the REP of
    ///         the model in `contextId` and in the global context on its first interaction there,
    ///         and, when `hasReference`, moves `Ra` in both.
    function autoEval(
        bytes32 interactionId,
        bytes32 modelId,
        bytes32 contextId,
        address user,
        bool hasReference,
        uint256 sA,
        uint256 wA,
        string calldata evidenceCid
    ) external onlyRole(ORACLE_ROLE) {
        _autoEval(interactionId, modelId, contextId, user, hasReference, sA, wA, evidenceCid);
    }

    /// @notice `autoEval` for many interactions, all or nothing.
    function autoEvalBatch(
        bytes32[] calldata interactionIds,
        bytes32[] calldata modelIds,
        bytes32[] calldata contextIds,
        address[] calldata users,
        bool[] calldata hasReference,
        uint256[] calldata sA,
        uint256[] calldata wA,
        string[] calldata evidenceCids
    ) external onlyRole(ORACLE_ROLE) {
        uint256 len = interactionIds.length;
        if (
            modelIds.length != len || contextIds.length != len || users.length != len
                || hasReference.length != len || sA.length != len || wA.length != len
                || evidenceCids.length != len
        ) revert LengthMismatch();
        for (uint256 i = 0; i < len; ++i) {
            _autoEval(
                interactionIds[i], modelIds[i], contextIds[i], users[i], hasReference[i], sA[i], wA[i], evidenceCids[i]
            );
        }
    }

    /// @notice The human part, answered by the interaction's user, unless they own the model
    ///         (OwnModel): six 1..5 Likert answers.
    ///         Computes Sh, D (from block timestamps), wh and moves `Rh` in the interaction's
    ///         context and in the global context.
    function humEval(
        bytes32 interactionId,
        uint8 reliability,
        uint8 completeness,
        uint8 utility,
        uint8 familiarity,
        uint8 trust,
        uint8 uncertainty
    ) external {
        Interaction storage it = _interactions[interactionId];
        address user = it.user;
        if (user == address(0)) revert UnknownInteraction(interactionId);
        if (_msgSender() != user) revert NotInteractionUser();
        if (!access.hasRole(USER_ROLE, user)) revert NotAUser(user); // a suspended account rates nothing
        if (it.byOwner) revert OwnModel(_modelIdAt[it.modelIndex], user);
        if (it.humanDone) revert AlreadyEvaluated();
        if (
            !_likert(reliability) || !_likert(completeness) || !_likert(utility) || !_likert(familiarity)
                || !_likert(trust) || !_likert(uncertainty)
        ) revert AnswerOutOfRange();

        uint256 previous = _lastHumanEvalAt[user];
        if (previous == 0) previous = identity.registeredAt(user);
        uint256 sH = answerScore(reliability, completeness, utility);
        uint256 d = block.timestamp > previous ? minutesSince(block.timestamp - previous) : 0;
        uint256 wH = humanWeight(userWeight(familiarity, trust, uncertainty), d);

        it.sH = uint64(sH);
        it.wH = uint64(wH);
        it.humanDone = true;
        _lastHumanEvalAt[user] = uint64(block.timestamp);
        emit HumanEvaluated(interactionId, user, sH, wH, d);

        bytes32 modelId = _modelIdAt[it.modelIndex];
        _humanMove(interactionId, modelId, _contextIdAt[it.contextIndex], sH, wH);
        _humanMove(interactionId, modelId, GLOBAL_CONTEXT, sH, wH);
    }

    /// @notice Moves `R` with the combined part; anyone, once per interaction, after `humEval`.
    function updateReputation(bytes32 interactionId) external {
        _updateReputation(interactionId);
    }

    /// @notice `updateReputation` for many interactions, all or nothing.
    function updateReputationBatch(bytes32[] calldata interactionIds) external {
        for (uint256 i = 0; i < interactionIds.length; ++i) {
            _updateReputation(interactionIds[i]);
        }
    }

    // ------------------------------------------------------------------------------------
    // Arena battles
    // ------------------------------------------------------------------------------------
    /// @notice Attests that two interactions answered one prompt of their user in an arena
    ///         battle; ORACLE_ROLE only (the contract cannot see prompts). The interactions must be
    ///         of one user and one context, by two models, and in no other battle. `voided`: an
    ///         answer named its own model, so a vote on the battle is recorded but not counted.
    function openBattle(bytes32 battleId, bytes32 interactionA, bytes32 interactionB, bool voided)
        external
        onlyRole(ORACLE_ROLE)
    {
        _openBattle(battleId, interactionA, interactionB, voided);
    }

    /// @notice `openBattle` for many battles, all or nothing.
    function openBattleBatch(
        bytes32[] calldata battleIds,
        bytes32[] calldata interactionsA,
        bytes32[] calldata interactionsB,
        bool[] calldata voided
    ) external onlyRole(ORACLE_ROLE) {
        uint256 len = battleIds.length;
        if (interactionsA.length != len || interactionsB.length != len || voided.length != len) {
            revert LengthMismatch();
        }
        for (uint256 i = 0; i < len; ++i) {
            _openBattle(battleIds[i], interactionsA[i], interactionsB[i], voided[i]);
        }
    }

    /// @notice The battle's user votes once: 1 = A better, 2 = B better, 3 = tie, 4 = both bad.
    ///         No role check beyond the user's own USER_ROLE (a suspended account votes nothing);
    ///         the owner of either side's model votes not at all (OwnModel).
    function vote(bytes32 battleId, uint8 outcome) external {
        Battle storage b = _battles[battleId];
        address user = b.user;
        if (user == address(0)) revert UnknownBattle(battleId);
        if (_msgSender() != user) revert NotBattleUser();
        if (!access.hasRole(USER_ROLE, user)) revert NotAUser(user);
        uint8 ownSide = b.ownSide;
        if (ownSide != 0) {
            bytes32 own = ownSide == 1 ? b.interactionA : b.interactionB;
            revert OwnModel(_modelIdAt[_interactions[own].modelIndex], user);
        }
        if (b.outcome != 0) revert AlreadyVoted();
        if (outcome < OUTCOME_A_BETTER || outcome > OUTCOME_BOTH_BAD) revert OutcomeOutOfRange();
        b.outcome = outcome;
        emit Voted(battleId, user, outcome, !b.voided);
    }

    // ------------------------------------------------------------------------------------
    // Views
    // ------------------------------------------------------------------------------------
    /// @notice The REP of a model in a context; all zero when it has none there.
    function reputation(bytes32 modelId, bytes32 contextId)
        external
        view
        returns (uint256 rA, uint256 rH, uint256 r, uint64 nAuto, uint64 nHuman)
    {
        Rep memory rep = _unpack(_reps[modelId][contextId]);
        return (rep.ra, rep.rh, rep.r, uint64(rep.nAuto), uint64(rep.nHuman));
    }

    /// @notice An interaction as recorded; all zero when unknown.
    function interaction(bytes32 interactionId)
        external
        view
        returns (
            bytes32 modelId,
            bytes32 contextId,
            address user,
            bool hasReference,
            uint256 sA,
            uint256 wA,
            uint256 sH,
            uint256 wH,
            bool humanDone,
            bool reputationDone,
            bytes32 evidenceHash
        )
    {
        Interaction storage it = _interactions[interactionId];
        if (it.user == address(0)) {
            return (bytes32(0), bytes32(0), address(0), false, 0, 0, 0, 0, false, false, bytes32(0));
        }
        return (
            _modelIdAt[it.modelIndex],
            _contextIdAt[it.contextIndex],
            it.user,
            it.hasReference,
            it.sA,
            it.wA,
            it.sH,
            it.wH,
            it.humanDone,
            it.reputationDone,
            it.evidenceHash
        );
    }

    function interactionExists(bytes32 interactionId) external view returns (bool) {
        return _interactions[interactionId].user != address(0);
    }

    /// @notice A battle as recorded; all zero when unknown. `outcome` is 0 until the vote.
    function battle(bytes32 battleId)
        external
        view
        returns (
            bytes32 contextId,
            bytes32 modelA,
            bytes32 modelB,
            bytes32 interactionA,
            bytes32 interactionB,
            address user,
            bool voided,
            uint8 outcome,
            bool voted
        )
    {
        Battle storage b = _battles[battleId];
        if (b.user == address(0)) return (0, 0, 0, 0, 0, address(0), false, 0, false);
        Interaction storage itA = _interactions[b.interactionA];
        return (
            _contextIdAt[itA.contextIndex],
            _modelIdAt[itA.modelIndex],
            _modelIdAt[_interactions[b.interactionB].modelIndex],
            b.interactionA,
            b.interactionB,
            b.user,
            b.voided,
            b.outcome,
            b.outcome != 0
        );
    }

    /// @notice The battle an interaction is in (zero when none).
    function battleOf(bytes32 interactionId) external view returns (bytes32) {
        return _battleOf[interactionId];
    }

    /// @notice Running sums of a context: the number of models holding a REP there and the sums
    ///         of their Ra, Rh and R (each mean is sum / models, truncated).
    function contextStats(bytes32 contextId)
        external
        view
        returns (bool exists, uint64 models, uint256 sumRa, uint256 sumRh, uint256 sumR)
    {
        Context storage c = _contexts[contextId];
        return (c.exists, c.n, c.sumRa, c.sumRh, c.sumR);
    }

    function contextExists(bytes32 contextId) external view returns (bool) {
        return _contexts[contextId].exists;
    }

    function modelExists(bytes32 modelId) external view returns (bool) {
        return _models[modelId].owner != address(0);
    }

    function modelOwner(bytes32 modelId) external view returns (address) {
        return _models[modelId].owner;
    }

    /// @notice Timestamp of the user's last human evaluation (0 when none yet).
    function lastHumanEvalAt(address user) external view returns (uint64) {
        return _lastHumanEvalAt[user];
    }

    // ------------------------------------------------------------------------------------
    // The model's arithmetic, exactly as lib/reputation.py
    // ------------------------------------------------------------------------------------
    /// Sh = (At^ + Ac^ + Au^) / 3 with x^ = (x - 1) / 4, i.e. (sum - 3) / 12.
    function answerScore(uint256 reliability, uint256 completeness, uint256 utility) public pure returns (uint256) {
        return (reliability + completeness + utility - 3) * WAD / 12;
    }

    /// Wh = (F^ + T^ + (1 - U^)) / 3, i.e. (F + T + 3 - U) / 12.
    function userWeight(uint256 familiarity, uint256 trust, uint256 uncertainty) public pure returns (uint256) {
        return (familiarity + trust + 3 - uncertainty) * WAD / 12;
    }

    /// D in 1e18 minutes from a block-timestamp difference in seconds, capped at one day.
    function minutesSince(uint256 elapsedSeconds) public pure returns (uint256) {
        uint256 d = elapsedSeconds * WAD / 60;
        uint256 cap = D_CAP_MINUTES * WAD;
        return d < cap ? d : cap;
    }

    /// e^x for 0 <= x <= a few WAD, by its Taylor series, each term truncated.
    function expWad(uint256 x) public pure returns (uint256) {
        uint256 total = WAD;
        uint256 term = WAD;
        for (uint256 k = 1; k <= EXP_MAX_TERMS; ++k) {
            term = term * x / (k * WAD);
            if (term == 0) break;
            total += term;
        }
        return total;
    }

    /// FD = (E - 1) / (E + 1) with E = e^(lambda D).
    function decayFactor(uint256 dMinutesWad) public view returns (uint256) {
        uint256 e = expWad(dMinutesWad * lambdaWad / WAD);
        return (e - WAD) * WAD / (e + WAD);
    }

    /// wh = Wh * FD.
    function humanWeight(uint256 userWeightWad, uint256 dMinutesWad) public view returns (uint256) {
        return userWeightWad * decayFactor(dMinutesWad) / WAD;
    }

    /// theta * h + (1 - theta) * a with theta = 2/3.
    function combine(uint256 human, uint256 auto_) public pure returns (uint256) {
        return (2 * human + auto_) / 3;
    }

    /// Eq. 6 (`update` in lib/reputation.py): move Rx towards S, at rate psi*w for a good answer and xi*w for a bad one.
    function updateScore(uint256 rx, uint256 s, uint256 w, uint256 threshold) public pure returns (uint256) {
        uint256 rw = w * (s >= threshold ? PSI_THIRDS : XI_THIRDS) / 3;
        return ((WAD - rw) * rx + rw * s) / WAD;
    }

    // ------------------------------------------------------------------------------------
    // Internals
    // ------------------------------------------------------------------------------------
    function _checkRole(bytes32 role) internal view {
        if (!access.hasRole(role, _msgSender())) revert Unauthorized(role, _msgSender());
    }

    function _likert(uint8 x) private pure returns (bool) {
        return x >= 1 && x <= 5;
    }

    function _addModel(bytes32 modelId, string calldata metadataCid) private {
        Model storage m = _models[modelId];
        if (m.owner != address(0)) revert ModelExists(modelId);
        if (bytes(metadataCid).length == 0) revert EmptyCid();
        uint32 index = modelCount + 1;
        m.owner = _msgSender();
        m.index = index;
        _modelIdAt[index] = modelId;
        modelCount = index;
        emit ModelAdded(modelId, _msgSender(), metadataCid);
    }

    function _autoEval(
        bytes32 interactionId,
        bytes32 modelId,
        bytes32 contextId,
        address user,
        bool hasReference,
        uint256 sA,
        uint256 wA,
        string calldata evidenceCid
    ) private {
        Interaction storage it = _interactions[interactionId];
        if (it.user != address(0)) revert InteractionExists(interactionId);
        Context storage c = _contexts[contextId];
        if (contextId == GLOBAL_CONTEXT || !c.exists) revert UnknownContext(contextId);
        Model storage m = _models[modelId];
        if (m.owner == address(0)) revert UnknownModel(modelId);
        if (!identity.isRegistered(user)) revert UserNotRegistered(user);
        if (!access.hasRole(USER_ROLE, user)) revert NotAUser(user); // a suspended account is named in nothing new
        if (sA > WAD || wA > WAD) revert ScoreOutOfRange();

        it.user = user;
        it.modelIndex = m.index;
        it.contextIndex = c.index;
        it.hasReference = hasReference;
        it.byOwner = user == m.owner;
        it.sA = uint64(sA);
        it.wA = uint64(wA);
        it.evidenceHash = keccak256(bytes(evidenceCid));
        emit AutoEvaluated(interactionId, modelId, contextId, user, hasReference, sA, wA, evidenceCid);

        _autoMove(interactionId, modelId, contextId, c, hasReference, sA, wA);
        _autoMove(interactionId, modelId, GLOBAL_CONTEXT, _contexts[GLOBAL_CONTEXT], hasReference, sA, wA);
    }

    function _openBattle(bytes32 battleId, bytes32 interactionA, bytes32 interactionB, bool voided) private {
        if (battleId == bytes32(0)) revert ZeroBattleId();
        Battle storage b = _battles[battleId];
        if (b.user != address(0)) revert BattleExists(battleId);
        Interaction storage itA = _interactions[interactionA];
        Interaction storage itB = _interactions[interactionB];
        address user = itA.user;
        if (user == address(0)) revert UnknownInteraction(interactionA);
        if (itB.user == address(0)) revert UnknownInteraction(interactionB);
        if (interactionA == interactionB) revert SameInteraction(interactionA);
        if (itB.user != user) revert DifferentUsers(user, itB.user);
        uint32 contextIndex = itA.contextIndex;
        if (itB.contextIndex != contextIndex) {
            revert DifferentContexts(_contextIdAt[contextIndex], _contextIdAt[itB.contextIndex]);
        }
        uint32 modelIndexA = itA.modelIndex;
        uint32 modelIndexB = itB.modelIndex;
        if (modelIndexA == modelIndexB) revert SameModel(_modelIdAt[modelIndexA]);
        bytes32 other = _battleOf[interactionA];
        if (other != bytes32(0)) revert InteractionInBattle(interactionA, other);
        other = _battleOf[interactionB];
        if (other != bytes32(0)) revert InteractionInBattle(interactionB, other);

        b.interactionA = interactionA;
        b.interactionB = interactionB;
        b.user = user;
        b.voided = voided;
        if (itA.byOwner) b.ownSide = 1;
        else if (itB.byOwner) b.ownSide = 2;
        _battleOf[interactionA] = battleId;
        _battleOf[interactionB] = battleId;
        emit BattleOpened(
            battleId,
            _contextIdAt[contextIndex],
            _modelIdAt[modelIndexA],
            _modelIdAt[modelIndexB],
            interactionA,
            interactionB,
            user,
            voided
        );
    }

    /// `_ensure_rep` then, with a reference, `_move(rep, ctx, "ra", sA, wA)` and nAuto += 1.
    function _autoMove(
        bytes32 interactionId,
        bytes32 modelId,
        bytes32 contextId,
        Context storage c,
        bool hasReference,
        uint256 sA,
        uint256 wA
    ) private {
        Rep memory rep = _unpack(_reps[modelId][contextId]);
        bool changed;
        if (!rep.exists) {
            _createRep(rep, c);
            changed = true;
        }
        if (hasReference) {
            uint256 sum = c.sumRa;
            uint256 old = rep.ra;
            uint256 moved = updateScore(old, sA, wA, sum / c.n);
            rep.ra = moved;
            c.sumRa = uint128(sum - old + moved);
            if (rep.nAuto == MAX_N_AUTO) revert CounterOverflow();
            rep.nAuto += 1;
            changed = true;
        }
        if (changed) _storeRep(interactionId, modelId, contextId, rep);
    }

    /// A new REP starts at the means of the models already holding one in the context (0.5 when first).
    function _createRep(Rep memory rep, Context storage c) private {
        uint256 n = c.n;
        uint256 sumRa = c.sumRa;
        uint256 sumRh = c.sumRh;
        uint256 sumR = c.sumR;
        if (n == 0) {
            rep.ra = HALF;
            rep.rh = HALF;
            rep.r = HALF;
        } else {
            rep.ra = sumRa / n;
            rep.rh = sumRh / n;
            rep.r = sumR / n;
        }
        rep.exists = true;
        c.n = uint64(n + 1);
        c.sumRa = uint128(sumRa + rep.ra);
        c.sumRh = uint128(sumRh + rep.rh);
        c.sumR = uint128(sumR + rep.r);
    }

    /// `_move(rep, ctx, "rh", sH, wH)` and nHuman += 1.
    function _humanMove(bytes32 interactionId, bytes32 modelId, bytes32 contextId, uint256 sH, uint256 wH)
        private
    {
        Context storage c = _contexts[contextId];
        Rep memory rep = _unpack(_reps[modelId][contextId]);
        uint256 sum = c.sumRh;
        uint256 old = rep.rh;
        uint256 moved = updateScore(old, sH, wH, sum / c.n);
        rep.rh = moved;
        c.sumRh = uint128(sum - old + moved);
        if (rep.nHuman == MAX_N_HUMAN) revert CounterOverflow();
        rep.nHuman += 1;
        _storeRep(interactionId, modelId, contextId, rep);
    }

    function _updateReputation(bytes32 interactionId) private {
        Interaction storage it = _interactions[interactionId];
        if (it.user == address(0)) revert UnknownInteraction(interactionId);
        if (!it.humanDone) revert NoHumanEvaluation();
        if (it.reputationDone) revert AlreadyUpdated();
        it.reputationDone = true;
        uint256 s;
        uint256 w;
        if (it.hasReference) {
            s = combine(it.sH, it.sA);
            w = combine(it.wH, it.wA);
        } else {
            s = it.sH;
            w = it.wH;
        }
        bytes32 modelId = _modelIdAt[it.modelIndex];
        _combinedMove(interactionId, modelId, _contextIdAt[it.contextIndex], s, w);
        _combinedMove(interactionId, modelId, GLOBAL_CONTEXT, s, w);
    }

    /// `_move(rep, ctx, "r", s, w)`.
    function _combinedMove(bytes32 interactionId, bytes32 modelId, bytes32 contextId, uint256 s, uint256 w)
        private
    {
        Context storage c = _contexts[contextId];
        Rep memory rep = _unpack(_reps[modelId][contextId]);
        uint256 sum = c.sumR;
        uint256 old = rep.r;
        uint256 moved = updateScore(old, s, w, sum / c.n);
        rep.r = moved;
        c.sumR = uint128(sum - old + moved);
        _storeRep(interactionId, modelId, contextId, rep);
    }

    function _unpack(uint256 word) private pure returns (Rep memory rep) {
        rep.ra = word & MASK64;
        rep.rh = (word >> 64) & MASK64;
        rep.r = (word >> 128) & MASK64;
        rep.nAuto = (word >> 192) & MAX_N_AUTO;
        rep.nHuman = (word >> 224) & MAX_N_HUMAN;
        rep.exists = word & EXISTS_BIT != 0;
    }

    /// Packs and stores a REP (scores are <= 1e18 < 2^64 by construction) and emits its new state.
    function _storeRep(bytes32 interactionId, bytes32 modelId, bytes32 contextId, Rep memory rep) private {
        _reps[modelId][contextId] = rep.ra | (rep.rh << 64) | (rep.r << 128) | (rep.nAuto << 192)
            | (rep.nHuman << 224) | EXISTS_BIT;
        emit ReputationUpdated(
            interactionId, modelId, contextId, rep.ra, rep.rh, rep.r, uint64(rep.nAuto), uint64(rep.nHuman)
        );
    }
}
