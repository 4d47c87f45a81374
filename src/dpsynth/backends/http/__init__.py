"""OpenAI-compatible servers: the HTTP client, the chat generator, prices, and a loopback
server with deterministic answers for tests and trying a config offline."""
