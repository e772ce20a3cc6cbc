// The official TypeScript SDK's Streamable HTTP client, driving the server at the URL given as
// the argument (`toolonce mcp --listen`). CALLS=sequence (the default) lists the tools, calls
// `charge` twice with the same arguments, then `lookup` twice; CALLS=once calls `charge` once.
// TOKEN, when set, is sent as `Authorization: Bearer TOKEN`. Prints what it got as one JSON
// object on stdout, or `{"error": ...}` when the connection or a call failed.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const [url] = process.argv.slice(2);
const headers = process.env.TOKEN === undefined ? {} : { Authorization: `Bearer ${process.env.TOKEN}` };
const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
const client = new Client({ name: 'toolonce-sdk-http-client', version: '1.0.0' });
const amount = Number(process.env.AMOUNT ?? '7');
try {
  await client.connect(transport);
  if (process.env.CALLS === 'once') {
    const first = await client.callTool({ name: 'charge', arguments: { amount } });
    console.log(JSON.stringify({ first }));
  } else {
    const tools = await client.listTools();
    const first = await client.callTool({ name: 'charge', arguments: { amount } });
    const second = await client.callTool({ name: 'charge', arguments: { amount } });
    const read = await client.callTool({ name: 'lookup', arguments: {} });
    const reread = await client.callTool({ name: 'lookup', arguments: {} });
    console.log(JSON.stringify({
      server: client.getServerVersion(),
      tools: tools.tools.map((t) => t.name),
      first,
      second,
      read,
      reread,
    }));
  }
  await transport.terminateSession();
  await client.close();
} catch (e) {
  console.log(JSON.stringify({ error: String(e) }));
  process.exit(0);
}
