"""A LangGraph graph for the phone, the one docs/langgraph.md runs: it asks before it
deploys, then asks how many replicas (a typed answer), and says what it did.

    pip install -e '.[langgraph]'
    collie-gateway serve --sources docs/examples/graphs/sources.json --db /tmp/collie.db
"""

from __future__ import annotations

from langchain_core.messages import AIMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import interrupt
from typing_extensions import TypedDict  # pydantic reads it on Python 3.11


class Scale(TypedDict):
    replicas: int


def deploy(state: MessagesState) -> dict[str, list[AIMessage]]:
    """Deploy what the message names, once a person allows it."""
    tag = str(state["messages"][-1].text).strip() or "latest"
    # A card with Allow and Deny; the answer comes back as {"option": "allow"}.
    allowed = interrupt({"kind": "permission", "title": f"Deploy {tag} to production?"})
    if allowed["option"] != "allow":
        return {"messages": [AIMessage(f"Not deployed: {tag}.")]}
    # A form from the schema: the phone's "3" reaches the graph as 3, a wrong one is refused.
    scale = interrupt("How many replicas?", response_schema=Scale)
    return {"messages": [AIMessage(f"Deployed {tag} on {scale['replicas']} replicas.")]}


builder = StateGraph(MessagesState)
builder.add_node("deploy", deploy)
builder.add_edge(START, "deploy")
builder.add_edge("deploy", END)
graph = builder.compile()  # no checkpointer: the bridge gives it its own
