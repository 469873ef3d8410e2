"""The hooks bridge: Claude Code and Codex, started by the person in their own terminal, ask
the person on the phone through their hooks; the bridge is a wire-v1 durable agent.

Run by hand: ``collie-gateway bridge hooks --socket PATH --state PATH [--port 8791]``; set
up with ``collie-gateway hooks install claude-code|codex``.
"""
