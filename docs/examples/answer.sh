#!/bin/sh
# Answer hello's text ask from the command line, as the phone would.
set -eu
GATEWAY=${GATEWAY:-http://127.0.0.1:8765}

# hello is on the dashboard; its row counts the conversations waiting for you.
curl -sf "$GATEWAY/api/v1/dashboard"; echo

# Its conversation, with one card per ask: each card has an ask_id and a version.
curl -sf "$GATEWAY/api/v1/agents/hello/conversations/hello"; echo

# The answer. The request_id is made once per tap: send the same one again after a timeout
# and the agent still gets the answer once.
curl -sf -X POST "$GATEWAY/api/v1/agents/hello/asks/hello-name/answer" \
  -H 'Content-Type: application/json' \
  -d '{"request_id": "tap-1", "version": 1, "answer": {"text": "Ada"}}'; echo
