"""planfence's integrations: agent frameworks, the MCP proxy and servers, the CLI and the UI.

Their errors, under the store's and the gate's (`planfence.shared_memory.errors`):

PlanfenceError
├── ConfigError
│   └── KeyringError             an owner keyring that cannot load [adapters.owner_service]
├── UpstreamFailure              the MCP proxy's upstream failed a call [adapters.mcp]
├── ConcurrentTurnError          two AutoGen turns overlapped on one workbench [adapters.autogen]
└── ImmutableRecordError         a LangGraph store write to a record [adapters.langgraph]
"""
