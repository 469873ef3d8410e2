#!/bin/sh
# Send hello a message, then stop its streamed reply.
set -eu
GATEWAY=${GATEWAY:-http://127.0.0.1:8765}
CHAT="$GATEWAY/api/v1/agents/hello/conversations/hello"

curl -sf -X POST "$CHAT/messages" -H 'Content-Type: application/json' \
  -d '{"request_id": "m-1", "text": "tell me a long story about a dog and a cat and a bird"}'; echo
sleep 1

# Stop sends the newest turn the phone saw (the chat's "turn"): a Stop meant for an earlier
# turn does not stop a later one.
TURN=$(curl -sf "$CHAT" | python3 -c 'import json, sys; print(json.load(sys.stdin)["turn"])')
curl -sf -X POST "$CHAT/stop" -H 'Content-Type: application/json' \
  -d "{\"request_id\": \"stop-1\", \"turn\": $TURN}"; echo
