"""The API edge: the informer and object watches, events, patches and the agent's RBAC; the fake API
server held to a real one (its own tests and the contract)."""
