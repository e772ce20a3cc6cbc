// A protocol 2026-07-28 server over Streamable HTTP that answers every request on an event
// stream, for the tests of what a server sends on one request's answer stream: no sessions, no
// GET stream (405), notifications and answers accepted with 202. Written by hand (the SDK's
// server refuses that protocol's version header).
//
// Tools: `report` (readOnlyHint) waits `ms` milliseconds, then sends on the call's own stream,
// each carrying `text`: `notifications/progress` (when the call asked for it, with its token),
// `notifications/message`, and an `elicitation/create` request of its own (whose answer it does
// not wait for); then its answer, `reported <text>`.
// Prints `PORT=<n>` once it listens.
import http from 'node:http';

const tools = [
  {
    name: 'report',
    description: 'Reports progress, logs and asks, then answers.',
    inputSchema: { type: 'object', properties: { text: { type: 'string' }, ms: { type: 'number' } } },
    annotations: { readOnlyHint: true },
  },
];
let asked = 0;

const server = http.createServer(async (req, res) => {
  if (req.method !== 'POST') {
    res.writeHead(405);
    res.end();
    return;
  }
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  const message = JSON.parse(Buffer.concat(chunks).toString('utf8'));
  if (message.method === undefined || message.id === undefined) {
    res.writeHead(202);
    res.end();
    return;
  }
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  const send = (m) => res.write(`event: message\ndata: ${JSON.stringify({ jsonrpc: '2.0', ...m })}\n\n`);
  const answer = (result) => {
    send({ id: message.id, result });
    res.end();
  };
  if (message.method === 'tools/list') return answer({ tools });
  if (message.method !== 'tools/call' || message.params?.name !== 'report') return answer({});
  const { text = '', ms = 0 } = message.params.arguments ?? {};
  await new Promise((resolve) => setTimeout(resolve, ms));
  const token = message.params._meta?.progressToken;
  if (token !== undefined) {
    send({ method: 'notifications/progress', params: { progressToken: token, progress: 1, message: text } });
  }
  send({ method: 'notifications/message', params: { level: 'info', data: text } });
  asked += 1;
  send({
    id: `ask-${asked}`,
    method: 'elicitation/create',
    params: { mode: 'form', message: text, requestedSchema: { type: 'object', properties: {} } },
  });
  answer({ content: [{ type: 'text', text: `reported ${text}` }] });
});

server.listen(0, '127.0.0.1', () => console.log(`PORT=${server.address().port}`));
