// The official TypeScript SDK's Streamable HTTP client for the tests of `toolonce mcp --listen`
// in front of servers that talk back: it declares the roots capability (answering
// `roots/list` with ROOT), records the log notifications it gets, and asks for progress on
// every call. STEPS is a JSON array of `{tool, args}` called in order; TOKEN, when set, goes as
// `Authorization: Bearer TOKEN`. Prints one JSON object on stdout: the server's name, each
// call's result, the log messages and the progress notifications received (per call), or
// `{"error": ...}` when the connection or a call failed.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  ListRootsRequestSchema,
  LoggingMessageNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';

const [url] = process.argv.slice(2);
const headers = process.env.TOKEN === undefined ? {} : { Authorization: `Bearer ${process.env.TOKEN}` };
const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
const client = new Client(
  { name: 'toolonce-sdk-gateway-client', version: '1.0.0' },
  { capabilities: { roots: {} } },
);
const root = process.env.ROOT ?? 'file:///gateway-client-root';
client.setRequestHandler(ListRootsRequestSchema, async () => ({ roots: [{ uri: root, name: 'root' }] }));
const logs = [];
client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
  logs.push(n.params.data);
});
const steps = JSON.parse(process.env.STEPS ?? '[]');
try {
  await client.connect(transport);
  const results = [];
  const progress = [];
  for (const step of steps) {
    const seen = [];
    results.push(
      await client.callTool({ name: step.tool, arguments: step.args ?? {} }, undefined, {
        onprogress: (p) => seen.push(p),
        timeout: 30000,
      }),
    );
    progress.push(seen);
  }
  console.log(JSON.stringify({ server: client.getServerVersion(), results, logs, progress }));
  await transport.terminateSession();
  await client.close();
} catch (e) {
  console.log(JSON.stringify({ error: String(e) }));
  process.exit(0);
}
