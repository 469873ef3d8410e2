HELLO_TOKEN=s3cret collie-gateway serve --sources docs/examples/sources.json --db /tmp/collie.db --port 8765
