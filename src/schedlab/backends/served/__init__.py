"""A real ``vllm serve`` replayed over HTTP: the server process and its lifeline, the HTTP client,
the served replay and its acceptance rules, where requests spent their time outside the
scheduler, and what the host did meanwhile."""
