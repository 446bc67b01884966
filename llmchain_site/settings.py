"""One settings module, driven by environment variables, safe defaults for a laptop."""

import os
from pathlib import Path
from urllib.parse import urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("LLMCHAIN_VAR_DIR", BASE_DIR / "var"))
VAR_DIR.mkdir(parents=True, exist_ok=True)


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    return default if value is None else value.lower() in ("1", "true", "yes", "on")


DEBUG = env_bool("DEBUG", True)
# "production" (the default when DEBUG is off): HTTPS only, HSTS, secure cookies, ALLOWED_HOSTS required
# (the end of this file); "development": none of that, for a laptop. ops/checks.py refuses to start an
# unsafe deployment (the committed SECRET_KEY, anvil's keys off a local chain, ...).
LLMCHAIN_PROFILE = os.environ.get("LLMCHAIN_PROFILE", "development" if DEBUG else "production")
# The default key is for a laptop only; production sets SECRET_KEY.
DEVELOPMENT_SECRET_KEY = "llmchain-insecure-development-key"  # ops/checks.py refuses it with DEBUG off
SECRET_KEY = os.environ.get("SECRET_KEY", DEVELOPMENT_SECRET_KEY)
ALLOWED_HOSTS = [h for h in os.environ.get(
    "ALLOWED_HOSTS", "" if LLMCHAIN_PROFILE == "production" else "localhost,127.0.0.1,[::1],testserver").split(",") if h]

INSTALLED_APPS = [
    "llmchain_site",  # runserver is daphne's, imported only when serving (management/commands/runserver.py)
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # the Swagger UI's assets, served from static (no CDN)
    "channels",
    "axes",  # lockout after repeated failed logins (page, admin, API token)
    "apps.chain",
    "apps.chat",
    "apps.oracle",
    "apps.annotate",
    "apps.leaderboard",
    "ops",  # project-wide commands: up, bench, rekey
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",  # CONTENT_SECURITY_POLICY, at the end of this file
    "llmchain_site.errors.DebugNotFoundPage",  # outside CommonMiddleware: after its slash redirect
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",  # request.htmx
    "axes.middleware.AxesMiddleware",  # last: turns a locked-out login into the lockout page
]

ROOT_URLCONF = "llmchain_site.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]
WSGI_APPLICATION = "llmchain_site.wsgi.application"
ASGI_APPLICATION = "llmchain_site.asgi.application"

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", f"sqlite:///{VAR_DIR / 'llmchain.sqlite3'}"),
        conn_max_age=int(os.environ.get("DATABASE_CONN_MAX_AGE", "0")),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Workers and the web process share the file: wait for locks instead of failing.
    # IMMEDIATE: a transaction takes the write lock when it starts, so two processes never
    # deadlock upgrading read locks (SQLite's busy timeout cannot resolve that case); WAL lets
    # readers go on while one process writes.
    DATABASES["default"].setdefault("OPTIONS", {}).update({
        "timeout": 30, "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"})
    # Tests start worker processes that must see the test database: keep it in a file.
    # One file per test run, so that two runs on one machine never share (and damage) it.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / f"test-{os.getpid()}.sqlite3")}
# PostgreSQL through a pool of at most this many connections per process (psycopg_pool; 0: none, a
# connection per request). Under daphne every concurrent request runs in a thread of its own with
# its own connection: without a pool, 100 chats at once on two web processes exhausted PostgreSQL's
# 100 connections ("sorry, too many clients already", tests/ops/test_topology.py). With it, a
# request waits up to 30 s for a free connection. DATABASE_CONN_MAX_AGE must stay 0 with a pool.
LLMCHAIN_DB_POOL_SIZE = int(os.environ.get("LLMCHAIN_DB_POOL_SIZE", "0"))
if LLMCHAIN_DB_POOL_SIZE and DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": 1, "max_size": LLMCHAIN_DB_POOL_SIZE, "timeout": 30}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Rendered boards are cached per process, keyed by the boards' version (apps/leaderboard/boards.py):
# 21 boards x 7 sort columns x 2 directions x page/table/JSON/CSV views is ~1,200 keys, above
# LocMemCache's default of 300, which would evict them round-robin under load.
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "llmchain",
                      "OPTIONS": {"MAX_ENTRIES": int(os.environ.get("LLMCHAIN_CACHE_ENTRIES", "5000"))}}}
# With Redis, one cache for every process, so that limits counted in it (chat sockets per user,
# throttles) hold across web processes: LLMCHAIN_CACHE_URL, by default REDIS_URL's server with the
# next database number (a cache clear flushes its database: never the channel layer's).
def redis_db_url(url: str, offset: int) -> str:
    """A Redis URL on the same server as `url`, its database number moved by `offset` (of Redis's 16)."""
    from urllib.parse import urlparse

    parsed = urlparse(url)
    return parsed._replace(path=f"/{(int((parsed.path or '/0').strip('/') or 0) + offset) % 16}").geturl()


_redis_for_layer = os.environ.get("REDIS_URL", "")
LLMCHAIN_CACHE_URL = os.environ.get("LLMCHAIN_CACHE_URL", "")
if not LLMCHAIN_CACHE_URL and _redis_for_layer:
    LLMCHAIN_CACHE_URL = redis_db_url(_redis_for_layer, 1)
if LLMCHAIN_CACHE_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": LLMCHAIN_CACHE_URL,
                          "KEY_PREFIX": "llmchain"}}

# Anonymous board reads answered from a versioned response cache in front of Django (apps/leaderboard/fastpath.py).
LLMCHAIN_BOARD_FASTPATH = os.environ.get("LLMCHAIN_BOARD_FASTPATH", "1") != "0"
LLMCHAIN_BOARD_FASTPATH_MB = float(os.environ.get("LLMCHAIN_BOARD_FASTPATH_MB", "128"))
# How old a kept board may be when served after its board changed, while it is rendered again (stale
# while revalidate): seconds since the site last knew it was current. 0: never served once changed.
LLMCHAIN_BOARD_MAX_STALE_S = float(os.environ.get("LLMCHAIN_BOARD_MAX_STALE_S", "30"))

REDIS_URL = os.environ.get("REDIS_URL", "")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # A read timeout above channels_redis's 5 s blocking receive: redis-py's default (5 s) ends an
            # idle `runworker` with "Timeout reading from" Redis.
            "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": 30}]},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
# Front-end libraries come from npm (package.json), served from node_modules: no CDN.
STATICFILES_DIRS = [
    BASE_DIR / "static",
    ("vendor/htmx", BASE_DIR / "node_modules" / "htmx.org" / "dist"),
    ("vendor/htmx-ext-ws", BASE_DIR / "node_modules" / "htmx-ext-ws"),
    ("vendor/chart.js", BASE_DIR / "node_modules" / "chart.js" / "dist"),
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "chat"

# --- Limits on abuse (apps/chat/limits.py) -------------------------------------------------------
LLMCHAIN_BEHIND_PROXY = env_bool("LLMCHAIN_BEHIND_PROXY", False)
# Logins: LLMCHAIN_LOGIN_FAILURES failed tries of one user name from one address lock that pair out
# for LLMCHAIN_LOCKOUT_MINUTES (django-axes, kept in the database: every process sees it), on the
# login page, the admin's and POST /api/token alike. Service accounts never log in.
AUTHENTICATION_BACKENDS = ["apps.chat.limits.LockoutBackend", "apps.chat.limits.AccountBackend"]
AXES_FAILURE_LIMIT = int(os.environ.get("LLMCHAIN_LOGIN_FAILURES", "5"))
AXES_COOLOFF_TIME = float(os.environ.get("LLMCHAIN_LOCKOUT_MINUTES", "15")) / 60  # hours
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_HTTP_RESPONSE_CODE = 429
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_CLIENT_IP_CALLABLE = "apps.chat.limits.client_ip"
AXES_VERBOSE = False
# Rates (DRF's throttles, counted in the shared cache) of what costs the site: prompts (each asks
# the model and k references, a BERTScore run and an autoEval), ratings, new conversations, sign-ups
# and token requests per address. The socket's prompts count against the same "prompts" rate.
LLMCHAIN_RATES = {
    "prompts": os.environ.get("LLMCHAIN_RATE_PROMPTS", "30/min"),
    "ratings": os.environ.get("LLMCHAIN_RATE_RATINGS", "60/min"),
    "conversations": os.environ.get("LLMCHAIN_RATE_CONVERSATIONS", "60/min"),
    "signups": os.environ.get("LLMCHAIN_RATE_SIGNUPS", "10/hour"),
    "tokens": os.environ.get("LLMCHAIN_RATE_TOKENS", "30/min"),
    "models": os.environ.get("LLMCHAIN_RATE_MODELS", "20/hour"),
    # the chat page's helpers as the user types: the context suggestion (the encoder runs each time)
    # and the live token count (the model's endpoint is asked when the text is new)
    "suggestions": os.environ.get("LLMCHAIN_RATE_SUGGESTIONS", "30/min"),
    "counts": os.environ.get("LLMCHAIN_RATE_COUNTS", "60/min"),
    # arena battles started (each draws a pair of models: a rate of their own, so no one fishes for a pair)
    "battles": os.environ.get("LLMCHAIN_RATE_BATTLES", "10/hour"),
    # how often one anonymous address may make /verify/ or /annotate/report/ recompute (it is shown
    # the last copy otherwise): every visitor of the same chain block and data shares one copy
    "rebuilds": os.environ.get("LLMCHAIN_RATE_REBUILDS", "6/min"),
}
# API tokens expire this many days after they were issued (POST /api/token gives a new one).
LLMCHAIN_TOKEN_DAYS = float(os.environ.get("LLMCHAIN_TOKEN_DAYS", "30"))
# Who may sign up: "open" (anyone), "invite" (with an invitation an admin created), "closed".
LLMCHAIN_SIGNUP = os.environ.get("LLMCHAIN_SIGNUP", "open")
LOGOUT_REDIRECT_URL = "board"
STATIC_ROOT = BASE_DIR / "staticfiles"

REST_FRAMEWORK = {
    # Token first: a missing or bad credential gets 401 with `WWW-Authenticate: Token`.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "apps.chat.limits.ExpiringTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticatedOrReadOnly"],
    # A view with a `throttle_scope` is limited at LLMCHAIN_RATES[scope], per user (per address when
    # anonymous); views without one (the cached public reads) are not.
    "DEFAULT_THROTTLE_CLASSES": ["rest_framework.throttling.ScopedRateThrottle"],
    "DEFAULT_THROTTLE_RATES": LLMCHAIN_RATES,
    # The client's address: REMOTE_ADDR, or behind the proxy the last one it adds to X-Forwarded-For.
    # Never None: then DRF would take a client's own X-Forwarded-For as its address.
    "NUM_PROXIES": 1 if LLMCHAIN_BEHIND_PROXY else 0,
    # Every list in pages (apps/chat/pagination.py): the body stays a list; Link and X-Total-Count say the rest.
    "DEFAULT_PAGINATION_CLASS": "apps.chat.pagination.LinkHeaderPagination",
    "PAGE_SIZE": int(os.environ.get("LLMCHAIN_API_PAGE_SIZE", "100")),
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "LLMChain API",
    "DESCRIPTION": "Models, contexts and conversations. Authenticate with a session or `Authorization: Token <key>` "
                   "(POST /api/token).",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# --- The ledger (apps/chain) -----------------------------------------------------------
# anvil's first well-known development key: a local default only, never a production secret.
ANVIL_DEV_KEY = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"
LLMCHAIN_RPC_URL = os.environ.get("LLMCHAIN_RPC_URL", "http://127.0.0.1:8545")
# A local development chain, where anvil's published keys may sign (and the oracle share the admin's key):
# by default when DEBUG is on and LLMCHAIN_RPC_URL is on loopback; LLMCHAIN_DEV_CHAIN=1 or 0 says it outright.
LLMCHAIN_DEV_CHAIN = env_bool("LLMCHAIN_DEV_CHAIN", DEBUG and urlsplit(LLMCHAIN_RPC_URL).hostname in (
    "127.0.0.1", "localhost", "::1"))
LLMCHAIN_ADMIN_KEY = os.environ.get("LLMCHAIN_ADMIN_KEY", ANVIL_DEV_KEY)
# Key that signs oracle transactions (autoEval, openBattle); the admin's by default on a laptop. Several
# keys, comma-separated, each granted ORACLE_ROLE: an interaction's autoEval goes through the one its id
# picks (keys.oracle_address), and submitters run with `chain submit --shard I/N` send through different
# ones at once.
LLMCHAIN_ORACLE_KEY = os.environ.get("LLMCHAIN_ORACLE_KEY", LLMCHAIN_ADMIN_KEY)
# The relayer: pays the gas of the ratings its raters signed (ERC-2771 requests, relayed in batches
# through the forwarder) and sends the batched updateReputation calls. "": a key derived from the oracle's
# (keys.default_relayer_key), a sender lane of its own, so relay trouble never holds up the oracle. Several keys,
# comma-separated: a rater's requests always go through the same one (keys.relayer_address), and
# submitters run with `chain submit --shard I/N` relay through different ones at once.
LLMCHAIN_RELAYER_KEY = os.environ.get("LLMCHAIN_RELAYER_KEY", "")
# Ratings relayed as signed requests ("auto": whenever the deployment has a forwarder; "0": every
# rating is a direct humEval from its rater's address, as before the forwarder).
LLMCHAIN_RELAY = os.environ.get("LLMCHAIN_RELAY", "auto")
# How long a signed request stays valid (its deadline); an expired one is signed again for a
# custodial rater, and a wallet user is asked to sign again.
LLMCHAIN_RELAY_DEADLINE_S = int(os.environ.get("LLMCHAIN_RELAY_DEADLINE_S", str(24 * 3600)))
# The door refuses a wallet-signed request that expires sooner than this (seconds ahead of the chain's
# clock): it must stay valid while it waits for its answer's score, a pass and a block; and a vote
# signed to expire at once could be replaced, after the names are shown, by a direct one.
LLMCHAIN_RELAY_MIN_DEADLINE_S = int(os.environ.get("LLMCHAIN_RELAY_MIN_DEADLINE_S", "600"))
LLMCHAIN_DEPLOYMENT = Path(os.environ.get("LLMCHAIN_DEPLOYMENT", VAR_DIR / "deployment.json"))
LLMCHAIN_CHAIN_DIR = Path(os.environ.get("LLMCHAIN_CHAIN_DIR", VAR_DIR / "chain"))
# "auto": priced when the node reports a base fee, free otherwise; or a fixed price in wei.
LLMCHAIN_GAS_PRICE = os.environ.get("LLMCHAIN_GAS_PRICE", "auto")
LLMCHAIN_POA = env_bool("LLMCHAIN_POA", False)
LLMCHAIN_TX_BATCH = int(os.environ.get("LLMCHAIN_TX_BATCH", "64"))
# At most this many queued calls per lane signed in one pass of the submitter (was a fixed 2000; 5000
# took `bench chain`'s autoEval from 1,470 to 1,941 confirmed/s at saturation on the 2-core development machine).
LLMCHAIN_SUBMIT_MAX_ITEMS = int(os.environ.get("LLMCHAIN_SUBMIT_MAX_ITEMS", "5000"))
LLMCHAIN_TX_MAX_ATTEMPTS = int(os.environ.get("LLMCHAIN_TX_MAX_ATTEMPTS", "8"))
LLMCHAIN_RESEND_AFTER_S = float(os.environ.get("LLMCHAIN_RESEND_AFTER_S", "30"))
# How long a submitter's claim on a sender lane lasts without renewal (a dead worker's lanes
# pass to another worker after this).
LLMCHAIN_LEASE_S = float(os.environ.get("LLMCHAIN_LEASE_S", "30"))
# When a block is final: "0" (QBFT/IBFT2: every block is), N (N blocks under the head), "finalized"
# or "safe" (the node's block tag), or "auto": 0 with LLMCHAIN_POA, LLMCHAIN_LOCAL_FINALITY blocks on
# a local development chain (anvil's ids), "finalized" elsewhere. The indexer folds final blocks
# only; the submitter confirms a call only when its transaction's block is final.
LLMCHAIN_FINALITY = os.environ.get("LLMCHAIN_FINALITY", "auto")
# A local anvil (state written every LLMCHAIN_NODE_STATE_INTERVAL_S s) that crashes loses the blocks
# mined since its last write: the local finality depth stays above what a crash can lose.
LLMCHAIN_NODE_STATE_INTERVAL_S = int(os.environ.get("LLMCHAIN_NODE_STATE_INTERVAL_S", "3"))
LLMCHAIN_LOCAL_FINALITY = int(os.environ.get("LLMCHAIN_LOCAL_FINALITY", max(5, LLMCHAIN_NODE_STATE_INTERVAL_S + 2)))
# Hashes of the last folded blocks kept to find the common ancestor after a reorg; a deeper
# reorg rebuilds the indexed tables from the deployment block.
LLMCHAIN_REORG_WINDOW = int(os.environ.get("LLMCHAIN_REORG_WINDOW", "256"))
# The longest wait between two re-sends of a transaction the node does not hold (they back off
# from 1 s, doubling), and between two checks of a lane the node may have lost final blocks of.
LLMCHAIN_RESEND_MAX_S = float(os.environ.get("LLMCHAIN_RESEND_MAX_S", "60"))

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    # Every line once, through the root's handler: Django's own "django" logger (which also takes
    # daphne's request lines, "django.channels.server") would print to its console handler and then
    # again through the root. Configuring it here drops its handlers and lets it propagate.
    "loggers": {"django": {"level": "INFO"}, "urllib3": {"level": "WARNING"},
                "httpx": {"level": "WARNING"}},
}

# Secrets that encrypt per-account signing keys at rest. The first encrypts, all decrypt:
# to rotate, put the new secret first, run `manage.py rekey`, then drop the old one.
LLMCHAIN_KEY_SECRETS = os.environ.get("LLMCHAIN_KEY_SECRETS", SECRET_KEY).split(",")

# --- Evidence on IPFS (apps/chain/evidence.py) -----------------------------------------
# "local": a content-addressed blob store on disk giving Kubo's CIDs (the embedded default);
# "kubo": blobs also go, through the pin outbox, to a node speaking the Kubo RPC API.
LLMCHAIN_IPFS_BACKEND = os.environ.get("LLMCHAIN_IPFS_BACKEND", "local")
LLMCHAIN_IPFS_DIR = Path(os.environ.get("LLMCHAIN_IPFS_DIR", VAR_DIR / "ipfs"))
LLMCHAIN_IPFS_API_URL = os.environ.get("LLMCHAIN_IPFS_API_URL", "http://127.0.0.1:5001")
LLMCHAIN_IPFS_TIMEOUT_S = float(os.environ.get("LLMCHAIN_IPFS_TIMEOUT_S", "10"))
LLMCHAIN_IPFS_RETRIES = int(os.environ.get("LLMCHAIN_IPFS_RETRIES", "2"))

# --- Models (apps/chat) -----------------------------------------------------------------
# A model leaves the running list after this many failed health checks in a row.
LLMCHAIN_HEALTH_FAILURES = int(os.environ.get("LLMCHAIN_HEALTH_FAILURES", "1"))
LLMCHAIN_HEALTH_INTERVAL_S = float(os.environ.get("LLMCHAIN_HEALTH_INTERVAL_S", "30"))
LLMCHAIN_ANSWER_MAX_TOKENS = int(os.environ.get("LLMCHAIN_ANSWER_MAX_TOKENS", "256"))
# Chat sockets one account may hold open at once (tabs, devices); one more is refused with a message.
LLMCHAIN_CHAT_SOCKETS_PER_USER = int(os.environ.get("LLMCHAIN_CHAT_SOCKETS_PER_USER", "8"))
# The conversation search reads at most this many of the user's latest messages.
LLMCHAIN_SEARCH_MESSAGES = int(os.environ.get("LLMCHAIN_SEARCH_MESSAGES", "5000"))
# The built-in model server `make run` starts (python manage.py serve_model).
LLMCHAIN_BUILTIN_MODEL_URL = os.environ.get("LLMCHAIN_BUILTIN_MODEL_URL", "http://127.0.0.1:8100/v1")
# Where the built-in model server `make run` starts says what it does while it starts (serve_model
# --status-file): the site shows the model as "starting", with its progress, until it answers.
LLMCHAIN_BUILTIN_STATUS_FILE = Path(os.environ.get("LLMCHAIN_BUILTIN_STATUS_FILE", VAR_DIR / "builtin-model.json"))
# Where serve_model keeps the built-in model once converted; empty: var/models/<the model's name>.
LLMCHAIN_MODEL_CACHE = os.environ.get("LLMCHAIN_MODEL_CACHE", "")
# The key serve_model requires as `Authorization: Bearer` (its --api-key); empty: none.
LLMCHAIN_MODEL_API_KEY = os.environ.get("LLMCHAIN_MODEL_API_KEY", "")
# Calls to hosts that others name (model endpoints, IPFS nodes, sites verify reads; lib/outbound.py) go
# to public addresses only, unless listed here: comma-separated host names, addresses or networks, each
# with an optional :port (`127.0.0.1:8100,localhost,10.0.0.0/8,[::1]`). Default: loopback on a laptop
# (DEBUG), else the built-in model server only. Cloud metadata addresses are refused whatever it says.
LLMCHAIN_OUTBOUND_ALLOW = os.environ.get(
    "LLMCHAIN_OUTBOUND_ALLOW", "localhost,127.0.0.0/8,[::1]" if DEBUG else urlsplit(LLMCHAIN_BUILTIN_MODEL_URL).netloc)
# Every answer from a model endpoint is cut at this many bytes and this many seconds in all.
LLMCHAIN_ANSWER_MAX_BYTES = int(os.environ.get("LLMCHAIN_ANSWER_MAX_BYTES", str(2 * 1024 * 1024)))
LLMCHAIN_ANSWER_MAX_S = float(os.environ.get("LLMCHAIN_ANSWER_MAX_S", "300"))
# The data `make run`'s demo reads (ops/demo.py): scaleeval/ (the expert queue's debates) and
# topical_chat_usr.json (the example meta-evaluation run); each part is skipped when absent.
LLMCHAIN_DATA_DIR = Path(os.environ.get("LLMCHAIN_DATA_DIR", BASE_DIR.parent / "shared" / "data"))
# Where `make run` finds the MT-Bench data it imports as replay models (skipped when absent).
LLMCHAIN_MTBENCH_DIR = Path(os.environ.get("LLMCHAIN_MTBENCH_DIR", LLMCHAIN_DATA_DIR / "mt_bench"))

# --- The oracle (apps/oracle) -----------------------------------------------------------
LLMCHAIN_ORACLE_K = int(os.environ.get("LLMCHAIN_ORACLE_K", "3"))  # reference models per answer
LLMCHAIN_ORACLE_TIMEOUT_S = float(os.environ.get("LLMCHAIN_ORACLE_TIMEOUT_S", "60"))  # per reference
LLMCHAIN_ORACLE_METRIC = os.environ.get("LLMCHAIN_ORACLE_METRIC", "bertscore")
# wA, the weight of the automatic score: "validated" multiplies the paper's mean R of the references by
# the validity the metric earned on human-labelled pairs against the longer-answer rule (0 until it beats
# it; lib/weighting.py); "paper" keeps the paper's mean R.
LLMCHAIN_AUTO_WEIGHT = os.environ.get("LLMCHAIN_AUTO_WEIGHT", "validated")
if LLMCHAIN_AUTO_WEIGHT not in ("validated", "paper"):
    raise ImproperlyConfigured(f"LLMCHAIN_AUTO_WEIGHT must be validated or paper, not {LLMCHAIN_AUTO_WEIGHT!r}")
# Pairs drawn from each labelled set when a newly registered judge is qualified (the full sets on demand).
LLMCHAIN_QUALIFY_SAMPLE = int(os.environ.get("LLMCHAIN_QUALIFY_SAMPLE", "4"))
LLMCHAIN_ORACLE_BATCH = int(os.environ.get("LLMCHAIN_ORACLE_BATCH", "16"))  # jobs scored together
# A worker's claim on a job lasts this long; a killed worker's jobs pass to another after it.
LLMCHAIN_ORACLE_LEASE_S = float(os.environ.get("LLMCHAIN_ORACLE_LEASE_S", "120"))

# --- Live debates between judge models (apps/oracle/debates.py, ScaleEval) -------------------------
LLMCHAIN_DEBATE_CRITERION = os.environ.get("LLMCHAIN_DEBATE_CRITERION", "helpfulness")
# lambda of the rating weight's time factor F_D, per minute, fixed in the Reputation contract when it
# is deployed (readable on-chain as lambdaWad): the paper's 0.001 by default, 0.000001 to 0.03.
LLMCHAIN_DECAY_LAMBDA = os.environ.get("LLMCHAIN_DECAY_LAMBDA", "0.001")
LLMCHAIN_DEBATE_ROUNDS = int(os.environ.get("LLMCHAIN_DEBATE_ROUNDS", "3"))  # D: round 0 + up to 2 discussions
LLMCHAIN_DEBATE_MAX_TOKENS = int(os.environ.get("LLMCHAIN_DEBATE_MAX_TOKENS", "320"))  # per judge reply
# the built-in model's reply as a judge: what it can write within the per-reply limit on a busy CPU
LLMCHAIN_BUILTIN_JUDGE_MAX_TOKENS = int(os.environ.get("LLMCHAIN_BUILTIN_JUDGE_MAX_TOKENS", "96"))
LLMCHAIN_DEBATE_TEMPERATURE = float(os.environ.get("LLMCHAIN_DEBATE_TEMPERATURE", "0.7"))
LLMCHAIN_DEBATE_TIMEOUT_S = float(os.environ.get("LLMCHAIN_DEBATE_TIMEOUT_S", "180"))  # per judge reply, debate or G-Eval
LLMCHAIN_DEBATE_LEASE_S = float(os.environ.get("LLMCHAIN_DEBATE_LEASE_S", "1800"))  # a whole debate
LLMCHAIN_DEBATE_EXPERTS = int(os.environ.get("LLMCHAIN_DEBATE_EXPERTS", "1"))  # verdicts asked per disagreement

# --- Boards and the expert queue (apps/leaderboard, apps/annotate) ----------------------------------
# Evaluations (automatic and human together) a model needs in a context to be ranked; fewer: provisional.
LLMCHAIN_BOARD_MIN_EVALUATIONS = int(os.environ.get("LLMCHAIN_BOARD_MIN_EVALUATIONS", "5"))
# People's ratings (the only evaluations that move R) a model needs in a context to be ranked, at least 2
# (an R band needs two); fewer: listed unranked, since its R is still about its starting value.
LLMCHAIN_BOARD_MIN_RATED = int(os.environ.get("LLMCHAIN_BOARD_MIN_RATED", "3"))
# Bootstrap rounds of the arena board's 95% intervals (apps/leaderboard/arena.py): of the Bradley-Terry Elo,
# and of the style-controlled Elo, fewer since each of its rounds refits on every vote (~0.3 s a round at
# 1,000,000 votes, against ~5 ms for a plain round). The served board states the rounds it used.
LLMCHAIN_ARENA_BOOTSTRAP = int(os.environ.get("LLMCHAIN_ARENA_BOOTSTRAP", "100"))
LLMCHAIN_ARENA_STYLE_BOOTSTRAP = int(os.environ.get("LLMCHAIN_ARENA_STYLE_BOOTSTRAP", "20"))
# Who refits a board's arena once the indexer has folded votes: "after-fold", the indexer's process right
# after its commit (at 1,000,000 votes the refit holds that process ~10 s: see `bench boards`), or "worker",
# a process of its own (`python manage.py leaderboard arena --follow`).
# A wallet's signed arena vote must stay valid this long (seconds) when it is sent: it is relayed only
# after both answers' autoEval and the openBattle are final, and an expired vote would leave the
# battle open on-chain with its names public and no vote cast.
LLMCHAIN_ARENA_VOTE_MIN_DEADLINE_S = int(os.environ.get("LLMCHAIN_ARENA_VOTE_MIN_DEADLINE_S", str(6 * 3600)))
# More than this many battles abandoned in the last LLMCHAIN_ARENA_ABANDON_DAYS days: the user's votes
# are kept but not counted (recorded on-chain as voided) until the abandons age out.
LLMCHAIN_ARENA_ABANDON_LIMIT = int(os.environ.get("LLMCHAIN_ARENA_ABANDON_LIMIT", "3"))
LLMCHAIN_ARENA_ABANDON_DAYS = float(os.environ.get("LLMCHAIN_ARENA_ABANDON_DAYS", "7"))
LLMCHAIN_ARENA_REFIT = os.environ.get("LLMCHAIN_ARENA_REFIT", "after-fold")
# How long an expert holds a queue item; an unanswered item passes to another expert after it.
LLMCHAIN_CLAIM_MINUTES = float(os.environ.get("LLMCHAIN_CLAIM_MINUTES", "15"))

# --- Serving in the open ------------------------------------------------------------------------------
# The Content-Security-Policy (django-csp), in every profile so that the tests run under it: scripts,
# styles, fonts and images from this site only (htmx, its ws extension, Chart.js and the page scripts
# are static files; no inline script, style or handler), requests and the chat's websocket to this
# site only ('self' covers ws:/wss: to the same host), no plugins, frames or foreign form targets.
CONTENT_SECURITY_POLICY = {"DIRECTIVES": {
    "default-src": ["'self'"], "script-src": ["'self'"], "style-src": ["'self'"], "img-src": ["'self'", "data:"],
    "font-src": ["'self'"], "connect-src": ["'self'"], "object-src": ["'none'"], "base-uri": ["'none'"],
    "form-action": ["'self'"], "frame-ancestors": ["'none'"]}}
if LLMCHAIN_PROFILE == "production":
    SECURE_SSL_REDIRECT = True
    SECURE_HSTS_SECONDS = int(os.environ.get("LLMCHAIN_HSTS_SECONDS", str(365 * 24 * 3600)))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("LLMCHAIN_HSTS_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_bool("LLMCHAIN_HSTS_PRELOAD", True)
    SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = True
    X_FRAME_OPTIONS = "DENY"
    # Behind a TLS-terminating proxy that sets X-Forwarded-Proto (and strips it from clients' requests).
    if LLMCHAIN_BEHIND_PROXY:
        SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
