// An MCP server (the official TypeScript SDK) that asks its client questions as soon as it is
// initialized, outside any request, as the filesystem server asks for roots: an elicitation, a
// sampling request and roots/list. Its one tool, `answers`, returns what it got (or the error).
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";

const server = new McpServer({ name: "asks-on-start", version: "1.0.0" });
const answers = {};
let settled;
const done = new Promise((resolve) => (settled = resolve));

async function attempt(name, ask) {
  try {
    answers[name] = await ask();
  } catch (err) {
    answers[name] = { error: String(err.message ?? err) };
  }
}

server.server.oninitialized = async () => {
  await attempt("elicitation", () =>
    server.server.elicitInput({
      message: "Which city?",
      requestedSchema: { type: "object", properties: { answer: { type: "string" } } },
    }),
  );
  await attempt("sampling", () =>
    server.server.createMessage({
      messages: [{ role: "user", content: { type: "text", text: "Write one line about the sea." } }],
      maxTokens: 64,
    }),
  );
  await attempt("roots", () => server.server.listRoots());
  settled();
};

server.registerTool(
  "answers",
  { description: "What the client answered at start-up (waits for all three)." },
  async () => {
    await done;
    return { content: [{ type: "text", text: JSON.stringify(answers) }] };
  },
);

await server.connect(new StdioServerTransport());
