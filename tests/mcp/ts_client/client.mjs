// Drives an MCP server with the official TypeScript client, as desktop apps and the MCP
// Inspector do: list the tools first (the client then validates results against each tool's
// outputSchema), then make the scenario's calls. Reads one JSON scenario (argument 1, or stdin)
// and prints one JSON report on stdout.
//
// Scenario: {"transport": "stdio", "command": "...", "args": [...], "env": {...}}
//        or {"transport": "http", "url": "http://127.0.0.1:PORT/mcp", "headers": {...}}
//        plus "calls": [{"name": "...", "arguments": {...}, "meta": {...}}
//                       | {"run": ["command", "arg", ...]}]  (run to completion between calls)
//        and optionally "roots": [{"uri": "file:///...", "name": "..."}] (the client then
//        offers roots, as desktop clients do; a call {"setRoots": [...]} changes them and sends
//        notifications/roots/list_changed); a call with "until": "TEXT" is repeated (up to
//        "tries" times, 100 ms apart) until its text content contains TEXT.
// Report:   {"tools": [{"name", "hasOutputSchema"}],
//            "results": [{"ok": true, "result": CallToolResult} | {"ok": false, "error": {...}}]}
//           or {"connectError": {"name", "code", "message"}} when connecting failed.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ListRootsRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const scenario = JSON.parse(process.argv[2] ?? readFileSync(0, "utf8"));

function transportFor(s) {
  if (s.transport === "http") {
    return new StreamableHTTPClientTransport(new URL(s.url), {
      requestInit: { headers: s.headers ?? {} },
    });
  }
  return new StdioClientTransport({
    command: s.command,
    args: s.args ?? [],
    env: s.env,
    stderr: "inherit",
  });
}

const capabilities = scenario.roots ? { roots: { listChanged: true } } : {};
const client = new Client({ name: "planfence-ts-test", version: "1.0.0" }, { capabilities });
let roots = scenario.roots;
if (roots) {
  client.setRequestHandler(ListRootsRequestSchema, async () => ({ roots }));
}
const timeout = (scenario.timeoutSeconds ?? 60) * 1000;
const report = { tools: [], results: [] };
try {
  await client.connect(transportFor(scenario), { timeout });
} catch (err) {
  // Refused at the door (e.g. 401 from an OAuth resource server): say so, and stop.
  report.connectError = { name: err.name ?? null, code: err.code ?? null, message: String(err.message ?? err) };
  process.stdout.write(JSON.stringify(report) + "\n");
  process.exit(0);
}
try {
  const listed = await client.listTools(undefined, { timeout });
  report.tools = listed.tools.map((t) => ({ name: t.name, hasOutputSchema: !!t.outputSchema }));
  for (const call of scenario.calls ?? []) {
    if (call.setRoots) {
      roots = call.setRoots;
      await client.sendRootsListChanged();
      continue;
    }
    if (call.run) {
      execFileSync(call.run[0], call.run.slice(1), { stdio: ["ignore", "ignore", "inherit"] });
      continue;
    }
    const params = { name: call.name, arguments: call.arguments ?? {} };
    if (call.meta) params._meta = call.meta;
    try {
      let result = await client.callTool(params, undefined, { timeout });
      for (let left = (call.tries ?? 50) - 1; call.until && left > 0; left--) {
        const text = (result.content ?? []).map((c) => c.text ?? "").join("\n");
        if (text.includes(call.until)) break;
        await new Promise((resolve) => setTimeout(resolve, 100));
        result = await client.callTool(params, undefined, { timeout });
      }
      report.results.push({ ok: true, result });
    } catch (err) {
      report.results.push({ ok: false, error: { code: err.code ?? null, message: String(err.message ?? err) } });
    }
  }
} finally {
  await client.close();
}
process.stdout.write(JSON.stringify(report) + "\n");
