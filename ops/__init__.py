"""Project-wide operations: `manage.py up` (what `make run` starts) and its `demo`, `bench` and `rekey`.

An app of its own, above every domain app, because each of these commands reaches into several
of them (the chain, the chat registry, the boards); `llmchain_site` stays settings and URLs.
"""
