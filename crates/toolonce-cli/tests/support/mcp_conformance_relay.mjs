// Serves a stdio MCP server (the command given as arguments, started once per session) over
// Streamable HTTP at http://127.0.0.1:<port>/mcp, built from the official TypeScript SDK's two
// transports and nothing else: every message from the HTTP client goes to the command's stdin,
// every message from its stdout goes back through the SDK's HTTP transport (an answer on its
// request's stream, anything else on the client's GET stream). The conformance suite drives
// servers only over HTTP; this puts the same HTTP front before a stdio server whether or not
// `toolonce mcp` stands between them, so the two runs differ only by toolonce.
//
// Prints `PORT=<n>` once it listens.
import http from 'node:http';
import { randomUUID } from 'node:crypto';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';

const [command, ...args] = process.argv.slice(2);
const sessions = new Map();
let allowedHosts = [];

async function openSession() {
  const child = new StdioClientTransport({ command, args, stderr: 'inherit' });
  const front = new StreamableHTTPServerTransport({
    sessionIdGenerator: () => randomUUID(),
    enableDnsRebindingProtection: true,
    allowedHosts,
    allowedOrigins: allowedHosts.map((h) => `http://${h}`),
    onsessioninitialized: (id) => sessions.set(id, front),
  });
  // A progress notification belongs on its request's stream, as the SDK's own server sends
  // it: on the GET stream it could arrive after the answer, when the client no longer listens.
  const progressOf = new Map();
  front.onmessage = (message) => {
    const token = message.params?._meta?.progressToken;
    if (message.id !== undefined && token !== undefined) progressOf.set(token, message.id);
    child.send(message).catch(() => front.close());
  };
  child.onmessage = (message) => {
    const relatedRequestId =
      message.method === 'notifications/progress' ? progressOf.get(message.params?.progressToken) : undefined;
    front.send(message, { relatedRequestId }).catch(() => {});
  };
  front.onclose = () => {
    sessions.delete(front.sessionId);
    child.close();
  };
  child.onclose = () => front.close();
  await child.start();
  await front.start();
  return front;
}

const server = http.createServer(async (req, res) => {
  if (new URL(req.url, 'http://x').pathname !== '/mcp') {
    res.writeHead(404).end();
    return;
  }
  const sessionId = req.headers['mcp-session-id'];
  let body;
  if (req.method === 'POST') {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    try {
      body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    } catch {
      body = undefined;
    }
  }
  let front = sessionId === undefined ? undefined : sessions.get(sessionId);
  if (front === undefined && sessionId === undefined && req.method === 'POST' && isInitializeRequest(body)) {
    front = await openSession();
  }
  if (front === undefined) {
    res.writeHead(sessionId === undefined ? 400 : 404, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32000, message: 'No valid session' }, id: null }));
    return;
  }
  await front.handleRequest(req, res, body);
});

server.listen(0, '127.0.0.1', () => {
  const port = server.address().port;
  allowedHosts = [`127.0.0.1:${port}`, `localhost:${port}`, `[::1]:${port}`];
  console.log(`PORT=${port}`);
});
