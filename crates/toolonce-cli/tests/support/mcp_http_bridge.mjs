// Serves a stdio MCP server (the command given as arguments) over Streamable HTTP the way a
// 2026-07-28 server is reached: no sessions, no GET stream (405), every request POSTed and
// answered with JSON, notifications accepted with 202. Like a strict 2026-07-28 server, it
// refuses (400) a request whose Mcp-Method header is not its method, whose Mcp-Name is not the
// tool it calls, or whose MCP-Protocol-Version is not the version in its `_meta`.
//
// Environment: REQUEST_LOG (one JSON line per POST: the three headers, the method, the request
// id, the Authorization header and the request's `_meta["com.example/who"]`, which tests use to
// tell whose request it was).
// Prints `PORT=<n>` once it listens.
import fs from 'node:fs';
import http from 'node:http';
import readline from 'node:readline';
import { spawn } from 'node:child_process';

const [command, ...args] = process.argv.slice(2);
const child = spawn(command, args, { stdio: ['pipe', 'pipe', 'inherit'] });
child.on('exit', () => process.exit(1));
const waiting = new Map();

readline.createInterface({ input: child.stdout }).on('line', (line) => {
  let message;
  try {
    message = JSON.parse(line);
  } catch {
    return;
  }
  const res = message.method === undefined ? waiting.get(JSON.stringify(message.id)) : undefined;
  if (res !== undefined) {
    waiting.delete(JSON.stringify(message.id));
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(line);
  }
});

function refuse(res, why) {
  res.writeHead(400, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32600, message: why }, id: null }));
}

const server = http.createServer(async (req, res) => {
  if (req.method !== 'POST') {
    res.writeHead(405);
    res.end();
    return;
  }
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  const raw = Buffer.concat(chunks).toString('utf8');
  const message = JSON.parse(raw);
  const seen = {
    method: message.method ?? null,
    mcpMethod: req.headers['mcp-method'] ?? null,
    mcpName: req.headers['mcp-name'] ?? null,
    version: req.headers['mcp-protocol-version'] ?? null,
    id: message.id ?? null,
    authorization: req.headers.authorization ?? null,
    who: message.params?._meta?.['com.example/who'] ?? null,
  };
  if (process.env.REQUEST_LOG) fs.appendFileSync(process.env.REQUEST_LOG, JSON.stringify(seen) + '\n');
  const version = message.params?._meta?.['io.modelcontextprotocol/protocolVersion'];
  if (message.method !== undefined && seen.mcpMethod !== message.method) {
    return refuse(res, 'Mcp-Method does not match the method');
  }
  if (message.method === 'tools/call' && seen.mcpName !== message.params?.name) {
    return refuse(res, 'Mcp-Name does not match the tool');
  }
  if (version !== undefined && seen.version !== version) {
    return refuse(res, 'MCP-Protocol-Version does not match _meta');
  }
  if (message.method !== undefined && message.id !== undefined) {
    waiting.set(JSON.stringify(message.id), res);
    child.stdin.write(raw + '\n');
  } else {
    child.stdin.write(raw + '\n');
    res.writeHead(202);
    res.end();
  }
});

server.listen(0, '127.0.0.1', () => console.log(`PORT=${server.address().port}`));
