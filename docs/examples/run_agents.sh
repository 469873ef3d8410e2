python docs/examples/hello_agent.py --socket /tmp/hello.sock --state /tmp/hello.db &
AGENT_TOKEN=s3cret python docs/examples/hello_agent.py --port 8711 --state /tmp/hello-http.db &
