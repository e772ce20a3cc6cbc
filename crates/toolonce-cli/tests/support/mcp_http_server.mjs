// A Streamable HTTP MCP server built on the official TypeScript SDK, for the tests of
// `toolonce mcp --upstream`. Copied next to the SDK's node_modules and run with node.
//
// Environment: MODE (`json`: JSON answers; otherwise SSE), COUNT_FILE (one line per execution
// of `write`), REQUEST_LOG (one JSON line per HTTP request: method, X-Test-Tag,
// MCP-Protocol-Version, Mcp-Method, Mcp-Name, whether it had a session id, the body as
// received; and `{aborted: <Mcp-Name>}` when the client closes a request before its answer
// is complete), REQUIRE_TOKEN
// (requests without `Authorization: Bearer <token>` get 401), TLS_KEY and TLS_CERT (PEM files:
// serve HTTPS), RESUMABLE (`1`: an event store, and `write` closes its call's event stream
// before answering, so the answer comes only to a client that resumes with Last-Event-ID;
// the SDK does this for protocol 2025-11-25 and later), PORT (0 or absent: any). It prints
// `PORT=<n>` once it listens.
//
// Tools: `write` (no annotations: a write) appends to COUNT_FILE and says which execution it
// was, after a log notification on the call's own stream; `read` (readOnlyHint) says how many
// writes ran; `announce` (readOnlyHint) sends `notifications/tools/list_changed`, which goes
// on the GET stream; `slow` (a write) notes `started` in COUNT_FILE and waits until the client
// cancels it, then notes `cancelled`; `crash` (a write) records an execution and exits the
// process before answering; `expire` (readOnlyHint) ends the session just after answering.
// `roots` (readOnlyHint) asks the client for its roots (a request from the server: on the
// call's event stream, or on the GET stream in JSON mode, where the SDK sends nothing but the
// answer on a POST) and answers with the first one's URI. A call of the unlisted tool `status-N` is answered with HTTP status N and no JSON-RPC answer.
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import { randomUUID } from 'node:crypto';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { InMemoryEventStore } from '@modelcontextprotocol/sdk/examples/shared/inMemoryEventStore.js';
import {
  CallToolRequestSchema,
  ListToolsRequestSchema,
  isInitializeRequest,
} from '@modelcontextprotocol/sdk/types.js';

const json = process.env.MODE === 'json';
const countFile = process.env.COUNT_FILE;
const requestLog = process.env.REQUEST_LOG;
const token = process.env.REQUIRE_TOKEN;
const resumable = process.env.RESUMABLE === '1';

function executions() {
  try {
    return fs
      .readFileSync(countFile, 'utf8')
      .split('\n')
      .filter((l) => l && JSON.parse(l).item !== undefined).length;
  } catch {
    return 0;
  }
}

function makeServer(transport) {
  const server = new Server(
    { name: 'toolonce-http-test', version: '1.0.0' },
    { capabilities: { tools: { listChanged: true }, logging: {} } },
  );
  server.setRequestHandler(ListToolsRequestSchema, async () => ({
    tools: [
      {
        name: 'write',
        description: 'Records an item (a side effect).',
        inputSchema: { type: 'object', properties: { item: { type: 'string' } } },
      },
      {
        name: 'read',
        description: 'Says how many writes ran.',
        inputSchema: { type: 'object' },
        annotations: { readOnlyHint: true },
      },
      {
        name: 'slow',
        description: 'Waits until cancelled.',
        inputSchema: { type: 'object' },
      },
      {
        name: 'crash',
        description: 'Records an execution, then dies.',
        inputSchema: { type: 'object' },
      },
      {
        name: 'expire',
        description: 'Ends the session.',
        inputSchema: { type: 'object' },
        annotations: { readOnlyHint: true },
      },
      {
        name: 'roots',
        description: "Says the client's first root.",
        inputSchema: { type: 'object' },
        annotations: { readOnlyHint: true },
      },
      {
        name: 'garbled',
        description: 'Records an execution; answers JSON a strict reader refuses.',
        inputSchema: { type: 'object', properties: { how: { type: 'string' } } },
      },
      {
        name: 'announce',
        description: 'Says the tool list changed.',
        inputSchema: { type: 'object' },
        annotations: { readOnlyHint: true },
      },
    ],
  }));
  server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    const { name } = request.params;
    const args = request.params.arguments ?? {};
    if (name === 'write') {
      if (resumable) extra.closeSSEStream?.();
      await extra.sendNotification({
        method: 'notifications/message',
        params: { level: 'info', data: `writing ${args.item}` },
      });
      const key = request.params._meta?.['toolonce/key'] ?? null;
      fs.appendFileSync(countFile, JSON.stringify({ item: args.item, key }) + '\n');
      return { content: [{ type: 'text', text: `wrote ${args.item} (execution ${executions()})` }] };
    }
    if (name === 'garbled') {
      fs.appendFileSync(countFile, JSON.stringify({ item: `garbled ${args.how}`, key: null }) + '\n');
      const text = `garbled #${executions()} \ud83d`;
      if (args.how === 'deep') {
        let deep = { leaf: true };
        for (let i = 0; i < 150; i++) deep = { deeper: deep };
        return { content: [{ type: 'text', text }], structuredContent: deep };
      }
      return { content: [{ type: 'text', text }] };
    }
    if (name === 'read') {
      return { content: [{ type: 'text', text: String(executions()) }] };
    }
    if (name === 'roots') {
      const related = json ? undefined : { relatedRequestId: extra.requestId };
      const { roots } = await server.listRoots(undefined, related);
      return { content: [{ type: 'text', text: roots[0]?.uri ?? 'none' }] };
    }
    if (name === 'expire') {
      setTimeout(() => transport().close(), 50);
      return { content: [{ type: 'text', text: 'expiring' }] };
    }
    if (name === 'crash') {
      fs.appendFileSync(countFile, JSON.stringify({ item: 'crash', key: null }) + '\n');
      process.exit(1);
    }
    if (name === 'slow') {
      fs.appendFileSync(countFile, JSON.stringify({ slow: 'started' }) + '\n');
      await new Promise((resolve) => {
        extra.signal.addEventListener('abort', resolve);
        setTimeout(resolve, 60000);
      });
      fs.appendFileSync(countFile, JSON.stringify({ slow: extra.signal.aborted ? 'cancelled' : 'done' }) + '\n');
      return { content: [{ type: 'text', text: 'slow done' }] };
    }
    if (name === 'announce') {
      await server.sendToolListChanged();
      return { content: [{ type: 'text', text: 'announced' }] };
    }
    throw new Error(`unknown tool ${name}`);
  });
  return server;
}

const transports = new Map();

const handler = async (req, res) => {
  try {
    let raw = null;
    if (req.method === 'POST') {
      const chunks = [];
      for await (const chunk of req) chunks.push(chunk);
      raw = Buffer.concat(chunks).toString('utf8');
    }
    if (requestLog) {
      const h = req.headers;
      const seen = {
        method: req.method,
        tag: h['x-test-tag'] ?? null,
        version: h['mcp-protocol-version'] ?? null,
        mcpMethod: h['mcp-method'] ?? null,
        mcpName: h['mcp-name'] ?? null,
        session: h['mcp-session-id'] !== undefined,
        body: raw,
      };
      fs.appendFileSync(requestLog, JSON.stringify(seen) + '\n');
      res.on('close', () => {
        if (!res.writableFinished) {
          fs.appendFileSync(requestLog, JSON.stringify({ aborted: seen.mcpName }) + '\n');
        }
      });
    }
    if (token !== undefined && req.headers.authorization !== `Bearer ${token}`) {
      res.writeHead(401, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32001, message: 'Unauthorized' }, id: null }));
      return;
    }
    let body;
    if (raw !== null) body = JSON.parse(raw);
    const status = /^status-(\d+)$/.exec(body?.params?.name ?? '');
    if (status !== null) {
      res.writeHead(Number(status[1]), { 'content-type': 'text/plain' });
      res.end(`status ${status[1]}`);
      return;
    }
    const sessionId = req.headers['mcp-session-id'];
    let transport = sessionId === undefined ? undefined : transports.get(sessionId);
    if (transport === undefined) {
      if (req.method !== 'POST' || sessionId !== undefined || !isInitializeRequest(body)) {
        res.writeHead(sessionId === undefined ? 400 : 404, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32000, message: 'No valid session' }, id: null }));
        return;
      }
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        enableJsonResponse: json,
        eventStore: resumable ? new InMemoryEventStore() : undefined,
        retryInterval: resumable ? 100 : undefined,
        onsessioninitialized: (id) => transports.set(id, transport),
      });
      transport.onclose = () => {
        if (transport.sessionId !== undefined) transports.delete(transport.sessionId);
      };
      const current = transport;
      await makeServer(() => current).connect(transport);
    }
    await transport.handleRequest(req, res, body);
  } catch (e) {
    if (!res.headersSent) {
      res.writeHead(500);
      res.end(String(e));
    }
  }
};

const httpServer =
  process.env.TLS_KEY === undefined
    ? http.createServer(handler)
    : https.createServer(
        { key: fs.readFileSync(process.env.TLS_KEY), cert: fs.readFileSync(process.env.TLS_CERT) },
        handler,
      );

httpServer.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => {
  console.log(`PORT=${httpServer.address().port}`);
});
