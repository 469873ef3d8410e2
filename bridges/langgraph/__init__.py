"""The LangGraph bridge: a LangGraph graph as a durable agent; each thread a conversation,
each pending interrupt an ask, resumed by interrupt id (``bridges.langgraph.mapping``).

Run by hand: ``collie-gateway bridge langgraph --graph my_pkg.agent:graph --checkpoints
graphs.sqlite --socket PATH --state PATH``. LangGraph is imported by the bridge's modules
only, never by the gateway.
"""
