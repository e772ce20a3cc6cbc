// The official TypeScript SDK's client, over stdio, driving the command given as arguments
// (`toolonce mcp ... --upstream URL`): lists the tools, calls `write` twice with the same
// arguments, then `read`, and prints what it got as one JSON object on stdout.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

const [command, ...args] = process.argv.slice(2);
const transport = new StdioClientTransport({ command, args, stderr: 'inherit' });
const client = new Client({ name: 'toolonce-sdk-client', version: '1.0.0' });
await client.connect(transport);
const tools = await client.listTools();
const first = await client.callTool({ name: 'write', arguments: { item: 'sdk' } });
const second = await client.callTool({ name: 'write', arguments: { item: 'sdk' } });
const read = await client.callTool({ name: 'read', arguments: {} });
console.log(JSON.stringify({
  server: client.getServerVersion(),
  tools: tools.tools.map((t) => t.name),
  first,
  second,
  read,
}));
await client.close();
