// The reference server for the official MCP conformance suite's server scenarios at the
// requirements of protocol 2026-07-28 (npm `@modelcontextprotocol/conformance`), written for
// toolonce's tests on the official TypeScript SDK's v2 server (`@modelcontextprotocol/server`),
// which speaks 2026-07-28: no sessions, a per-request `_meta` envelope, and multi-round-trip
// tool calls (SEP-2322: a tool answers `resultType: "input_required"` with the input it needs,
// and the client retries the call with `inputResponses` and the opaque `requestState`). The
// 2025-11-25 runs keep `mcp_conformance_server.mjs` (SDK 1.32.2, sessions).
//
// Every tool, resource and prompt the 2026-07-28 scenarios call for, with the names and answers
// their descriptions specify (`conformance list --server --requirements 2026-07-28`).
//
// `node mcp_conformance_server_2026.mjs stdio` serves over stdio; `node
// mcp_conformance_server_2026.mjs http` serves Streamable HTTP at http://127.0.0.1:<port>/mcp
// (Host and Origin checked against loopback, for the DNS rebinding scenario) and prints
// `PORT=<n>` once it listens.
import http from 'node:http';
import { randomUUID, randomBytes } from 'node:crypto';
import {
  CLIENT_CAPABILITIES_META_KEY,
  McpServer,
  ProtocolError,
  ProtocolErrorCode,
  ResourceTemplate,
  acceptedContent,
  createMcpHandler,
  createRequestStateCodec,
  fromJsonSchema,
  hostHeaderValidationResponse,
  inputRequired,
  localhostAllowedHostnames,
  originValidationResponse,
} from '@modelcontextprotocol/server';
import { serveStdio } from '@modelcontextprotocol/server/stdio';

// A 1x1 red PNG and a tiny silent WAV, base64.
const PNG =
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==';
const WAV = 'UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQAAAAA=';

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const noArgs = () => fromJsonSchema({ type: 'object', properties: {} });
const text = (t) => ({ content: [{ type: 'text', text: t }] });

// The state a multi-round tool hands the client is signed with this process's key: a retry
// whose state was altered is refused (-32602) before the tool runs. 2026-07-28 keeps nothing
// between rounds but this state, so the key is all that must outlive a request.
const states = createRequestStateCodec({ key: new Uint8Array(randomBytes(32)) });

const form = (message, field, type) =>
  inputRequired.elicit({
    message,
    requestedSchema: { type: 'object', properties: { [field]: { type } }, required: [field] },
  });
const ask = (question, maxTokens) =>
  inputRequired.createMessage({
    messages: [{ role: 'user', content: { type: 'text', text: question } }],
    maxTokens,
  });

// Set once the HTTP handler exists: the list-change triggers publish on its bus (over stdio
// there is no such bus, and they say so).
let publish;

function tools(server) {
  const tool = (name, description, run, inputSchema = noArgs(), annotations = undefined) =>
    server.registerTool(name, { description, inputSchema, annotations }, run);

  tool('test_simple_text', 'Returns simple text', async () =>
    text('This is a simple text response for testing.'),
  );
  tool('test_image_content', 'Returns an image', async () => ({
    content: [{ type: 'image', data: PNG, mimeType: 'image/png' }],
  }));
  tool('test_audio_content', 'Returns audio', async () => ({
    content: [{ type: 'audio', data: WAV, mimeType: 'audio/wav' }],
  }));
  tool('test_embedded_resource', 'Returns an embedded resource', async () => ({
    content: [
      {
        type: 'resource',
        resource: { uri: 'test://embedded-resource', mimeType: 'text/plain', text: 'This is an embedded resource content.' },
      },
    ],
  }));
  tool('test_multiple_content_types', 'Returns text, image and resource', async () => ({
    content: [
      { type: 'text', text: 'Multiple content types test:' },
      { type: 'image', data: PNG, mimeType: 'image/png' },
      {
        type: 'resource',
        resource: {
          uri: 'test://mixed-content-resource',
          mimeType: 'application/json',
          text: JSON.stringify({ test: 'data', value: 123 }),
        },
      },
    ],
  }));
  tool('test_tool_with_logging', 'Logs three messages while it runs', async (_args, ctx) => {
    for (const [i, data] of ['Tool execution started', 'Tool processing data', 'Tool execution completed'].entries()) {
      if (i > 0) await sleep(50);
      await ctx.mcpReq.notify({ method: 'notifications/message', params: { level: 'info', data } });
    }
    return text('Tool with logging executed successfully');
  });
  tool('test_tool_with_progress', 'Reports progress while it runs', async (_args, ctx) => {
    // Progress only for a caller that asked for it with a token.
    const progressToken = ctx.mcpReq._meta?.progressToken;
    if (progressToken !== undefined) {
      for (const [i, progress] of [0, 50, 100].entries()) {
        if (i > 0) await sleep(50);
        await ctx.mcpReq.notify({
          method: 'notifications/progress',
          params: { progressToken, progress, total: 100, message: `Completed step ${i + 1} of 3` },
        });
      }
    }
    return text('Tool with progress executed successfully');
  });
  tool('test_error_handling', 'Always fails', async () => ({
    isError: true,
    ...text('This tool intentionally returns an error for testing'),
  }));
  tool(
    'json_schema_2020_12_tool',
    'Tool with JSON Schema 2020-12 features',
    async (args) => text(`Received: ${JSON.stringify(args)}`),
    fromJsonSchema({
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      type: 'object',
      $defs: {
        address: { type: 'object', properties: { street: { type: 'string' }, city: { type: 'string' } } },
      },
      properties: { name: { type: 'string' }, address: { $ref: '#/$defs/address' } },
      additionalProperties: false,
    }),
  );

  // The stateless scenario's probes (SEP-2575), by the names it calls.
  tool('test_missing_capability', 'Needs the sampling capability the caller did not declare', async (_args, ctx) =>
    ctx.mcpReq.inputResponses?.llm_answer === undefined
      ? inputRequired({ inputRequests: { llm_answer: ask('Reply with the single word: pong', 16) } })
      : text('sampling round-trip complete'),
  );
  tool('test_streaming_elicitation', 'Answers with a result and no request of its own', async () =>
    text('stream observed: result frames only, no top-level requests'),
  );
  tool('test_logging_tool', 'Logs only when the request set _meta.logLevel', async (_args, ctx) => {
    await ctx.mcpReq.log('info', 'test_logging_tool ran');
    return text('logged through the request-scoped channel');
  });
  tool('test_trigger_tool_change', 'Publishes tools/list_changed to open listen streams', async () => {
    if (publish === undefined) return { isError: true, ...text('no listen streams over stdio') };
    publish.toolsChanged();
    return text('tools_list_changed published');
  });
  tool('test_trigger_prompt_change', 'Publishes prompts/list_changed to open listen streams', async () => {
    if (publish === undefined) return { isError: true, ...text('no listen streams over stdio') };
    publish.promptsChanged();
    return text('prompts_list_changed published');
  });

  // Multi-round tools (SEP-2322): each answers input_required until the retry carries what
  // it asked for.
  // Five scenarios call this one with the same (empty) arguments, each expecting a fresh first
  // round. Unmarked, toolonce would rightly take the later calls for duplicates of the first
  // completed one and replay its greeting; it has no effect, and says so.
  tool(
    'test_input_required_result_elicitation',
    'Asks for the caller name',
    async (_args, ctx) => {
      const name = acceptedContent(ctx.mcpReq.inputResponses, 'user_name')?.name;
      return typeof name === 'string'
        ? text(`Hello, ${name}!`)
        : inputRequired({ inputRequests: { user_name: form('What is your name?', 'name', 'string') } });
    },
    noArgs(),
    { idempotentHint: true },
  );
  tool('test_input_required_result_sampling', 'Asks the client to sample', async (_args, ctx) => {
    const said = ctx.mcpReq.inputResponses?.capital_question;
    if (said === undefined) {
      return inputRequired({ inputRequests: { capital_question: ask('What is the capital of France?', 100) } });
    }
    return text(`Sampling response: ${typeof said.content?.text === 'string' ? said.content.text : JSON.stringify(said)}`);
  });
  tool('test_input_required_result_list_roots', 'Asks for the client roots', async (_args, ctx) => {
    const roots = ctx.mcpReq.inputResponses?.client_roots?.roots;
    if (!Array.isArray(roots)) return inputRequired({ inputRequests: { client_roots: inputRequired.listRoots() } });
    return text(`Client exposed ${roots.length} root(s): ${roots.map((r) => r.uri).join(', ')}`);
  });
  tool('test_input_required_result_request_state', 'Round-trips signed requestState', async (_args, ctx) => {
    if (acceptedContent(ctx.mcpReq.inputResponses, 'confirm') === undefined) {
      return inputRequired({
        inputRequests: { confirm: form('Please confirm', 'ok', 'boolean') },
        requestState: await states.mint({ tool: 'request_state', nonce: randomUUID() }),
      });
    }
    if (ctx.mcpReq.requestState() === undefined) {
      throw new ProtocolError(ProtocolErrorCode.InvalidParams, 'requestState missing');
    }
    return text('state-ok: requestState verified and confirmation received');
  });
  tool('test_input_required_result_multiple_inputs', 'Asks for three inputs at once', async (_args, ctx) => {
    const responses = ctx.mcpReq.inputResponses;
    const name = acceptedContent(responses, 'user_name')?.name;
    const greeting = responses?.greeting?.content?.text;
    const roots = responses?.client_roots?.roots;
    if (typeof name === 'string' && typeof greeting === 'string' && Array.isArray(roots)) {
      return text(`${greeting} ${name}: ${roots.length} root(s) visible`);
    }
    return inputRequired({
      inputRequests: {
        user_name: form('What is your name?', 'name', 'string'),
        greeting: ask('Generate a greeting', 50),
        client_roots: inputRequired.listRoots(),
      },
      requestState: await states.mint({ tool: 'multiple_inputs', nonce: randomUUID() }),
    });
  });
  tool('test_input_required_result_multi_round', 'Two rounds, the round kept in requestState', async (_args, ctx) => {
    const state = ctx.mcpReq.requestState();
    const round = state?.tool === 'multi_round' && typeof state.round === 'number' ? state.round : 0;
    if (round === 0) {
      return inputRequired({
        inputRequests: { step1: form('Step 1: What is your name?', 'name', 'string') },
        requestState: await states.mint({ tool: 'multi_round', round: 1, nonce: randomUUID() }),
      });
    }
    if (round === 1) {
      const name = acceptedContent(ctx.mcpReq.inputResponses, 'step1')?.name ?? 'unknown';
      return inputRequired({
        inputRequests: { step2: form('Step 2: What is your favorite color?', 'color', 'string') },
        requestState: await states.mint({ tool: 'multi_round', round: 2, name, nonce: randomUUID() }),
      });
    }
    const color = acceptedContent(ctx.mcpReq.inputResponses, 'step2')?.color ?? 'unknown';
    return text(`Multi-round complete: ${state.name} likes ${color}`);
  });
  tool('test_input_required_result_tampered_state', 'Refuses a retry with altered requestState', async (_args, ctx) => {
    // An altered state never reaches here: the codec's verify refuses it first.
    if (ctx.mcpReq.requestState() !== undefined && acceptedContent(ctx.mcpReq.inputResponses, 'confirm') !== undefined) {
      return text('integrity-ok: requestState verified');
    }
    return inputRequired({
      inputRequests: { confirm: form('Please confirm', 'ok', 'boolean') },
      requestState: await states.mint({ tool: 'tampered_state', nonce: randomUUID() }),
    });
  });
  tool('test_input_required_result_capabilities', 'Asks only for what the caller can give', async (_args, ctx) => {
    if (ctx.mcpReq.inputResponses !== undefined) return text('Capability-aware input requests fulfilled');
    const declared = ctx.mcpReq.envelope?.[CLIENT_CAPABILITIES_META_KEY] ?? {};
    const inputRequests = {};
    if (declared.elicitation !== undefined) inputRequests.user_name = form('What is your name?', 'name', 'string');
    if (declared.sampling !== undefined) inputRequests.greeting = ask('Generate a short greeting', 50);
    if (declared.roots !== undefined) inputRequests.client_roots = inputRequired.listRoots();
    return Object.keys(inputRequests).length === 0
      ? text('No declared client capability supports an in-band input request')
      : inputRequired({ inputRequests });
  });
}

function resources(server) {
  const fixed = (name, uri, description, mimeType, body) =>
    server.registerResource(name, uri, { description, mimeType }, async () => ({
      contents: [{ uri, mimeType, ...body }],
    }));
  fixed('static-text', 'test://static-text', 'A static text resource', 'text/plain', {
    text: 'This is the content of the static text resource.',
  });
  fixed('static-binary', 'test://static-binary', 'A static PNG', 'image/png', { blob: PNG });
  fixed('watched-resource', 'test://watched-resource', 'A resource one may subscribe to', 'text/plain', {
    text: 'Watched resource content.',
  });
  server.registerResource(
    'template',
    new ResourceTemplate('test://template/{id}/data', { list: undefined }),
    { description: 'Data for an id', mimeType: 'application/json' },
    async (uri, { id }) => ({
      contents: [
        {
          uri: uri.toString(),
          mimeType: 'application/json',
          text: JSON.stringify({ id, templateTest: true, data: `Data for ID: ${id}` }),
        },
      ],
    }),
  );
}

function prompts(server) {
  const user = (content) => ({ role: 'user', content });
  const args = (names) =>
    fromJsonSchema({
      type: 'object',
      properties: Object.fromEntries(names.map(([name, description]) => [name, { type: 'string', description }])),
      required: names.map(([name]) => name),
    });
  server.registerPrompt('test_simple_prompt', { description: 'A prompt without arguments' }, async () => ({
    messages: [user({ type: 'text', text: 'This is a simple prompt for testing.' })],
  }));
  server.registerPrompt(
    'test_prompt_with_arguments',
    {
      description: 'A prompt with two arguments',
      argsSchema: args([
        ['arg1', 'First test argument'],
        ['arg2', 'Second test argument'],
      ]),
    },
    async ({ arg1, arg2 }) => ({
      messages: [user({ type: 'text', text: `Prompt with arguments: arg1='${arg1}', arg2='${arg2}'` })],
    }),
  );
  server.registerPrompt(
    'test_prompt_with_embedded_resource',
    { description: 'A prompt embedding a resource', argsSchema: args([['resourceUri', 'URI of the resource to embed']]) },
    async ({ resourceUri }) => ({
      messages: [
        user({ type: 'resource', resource: { uri: resourceUri, mimeType: 'text/plain', text: 'Embedded resource content for testing.' } }),
        user({ type: 'text', text: 'Please process the embedded resource above.' }),
      ],
    }),
  );
  server.registerPrompt('test_prompt_with_image', { description: 'A prompt with an image' }, async () => ({
    messages: [
      user({ type: 'image', data: PNG, mimeType: 'image/png' }),
      user({ type: 'text', text: 'Please analyze the image above.' }),
    ],
  }));
  // prompts/get may ask for input too (input-required-result-non-tool-request).
  server.registerPrompt('test_input_required_result_prompt', { description: 'Asks for context first' }, async (ctx) => {
    const context = acceptedContent(ctx.mcpReq.inputResponses, 'user_context')?.context;
    return typeof context === 'string'
      ? { messages: [user({ type: 'text', text: `Use the following context: ${context}` })] }
      : inputRequired({ inputRequests: { user_context: form('What context should the prompt use?', 'context', 'string') } });
  });
}

function makeServer() {
  const server = new McpServer(
    { name: 'toolonce-conformance-reference-2026', version: '1.0.0' },
    {
      capabilities: {
        tools: { listChanged: true },
        resources: { subscribe: true, listChanged: true },
        prompts: { listChanged: true },
        logging: {},
        completions: {},
      },
      requestState: { verify: states.verify },
    },
  );
  tools(server);
  resources(server);
  prompts(server);
  server.server.setRequestHandler('completion/complete', async () => ({
    completion: { values: ['paris', 'park', 'party'], total: 3, hasMore: false },
  }));
  server.server.setRequestHandler('logging/setLevel', async () => ({}));
  server.server.setRequestHandler('resources/subscribe', async () => ({}));
  server.server.setRequestHandler('resources/unsubscribe', async () => ({}));
  return server;
}

/// Node's request as a web `Request`, for the SDK's fetch-shaped handler.
async function toRequest(req, port) {
  const headers = new Headers();
  for (const [name, value] of Object.entries(req.headers)) {
    for (const one of Array.isArray(value) ? value : [value]) headers.append(name, one);
  }
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  const body = chunks.length === 0 || req.method === 'GET' || req.method === 'HEAD' ? undefined : Buffer.concat(chunks);
  return new Request(`http://127.0.0.1:${port}${req.url}`, { method: req.method, headers, body });
}

/// Writes a web `Response` to node's `res`, streaming its body as it comes (SSE).
async function send(response, res) {
  res.writeHead(response.status, Object.fromEntries(response.headers));
  if (response.body === null) {
    res.end();
    return;
  }
  res.flushHeaders();
  const reader = response.body.getReader();
  res.on('close', () => reader.cancel().catch(() => {}));
  for (;;) {
    const { done, value } = await reader.read().catch(() => ({ done: true }));
    if (done) break;
    res.write(value);
  }
  res.end();
}

if (process.argv[2] === 'stdio') {
  serveStdio(makeServer);
} else if (process.argv[2] === 'http') {
  const handler = createMcpHandler(makeServer, { onerror: () => {} });
  publish = handler.notify;
  const loopback = localhostAllowedHostnames();
  const httpServer = http.createServer(async (req, res) => {
    try {
      const port = httpServer.address().port;
      const request = await toRequest(req, port);
      if (new URL(request.url).pathname !== '/mcp') {
        res.writeHead(404).end();
        return;
      }
      const refused = hostHeaderValidationResponse(request, loopback) ?? originValidationResponse(request, loopback);
      await send(refused ?? (await handler.fetch(request)), res);
    } catch (error) {
      if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain' });
      res.end(String(error));
    }
  });
  httpServer.listen(0, '127.0.0.1', () => console.log(`PORT=${httpServer.address().port}`));
} else {
  console.error('usage: mcp_conformance_server_2026.mjs stdio|http');
  process.exit(2);
}
