// The reference server for the official MCP conformance suite's server scenarios
// (npm `@modelcontextprotocol/conformance`), written for toolonce's tests on the official
// TypeScript SDK's low-level `Server`: every tool, resource and prompt the scenarios call for,
// with the names and answers their descriptions specify (`conformance list --server` and each
// scenario's description).
//
// `node mcp_conformance_server.mjs stdio` serves over stdio; `node mcp_conformance_server.mjs
// http` serves Streamable HTTP at http://127.0.0.1:<port>/mcp (sessions, SSE answers with an
// event store so a stream may be closed and resumed, Host/Origin checked against loopback), and
// prints `PORT=<n>` once it listens.
import http from 'node:http';
import { randomUUID } from 'node:crypto';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { InMemoryEventStore } from '@modelcontextprotocol/sdk/examples/shared/inMemoryEventStore.js';
import {
  CallToolRequestSchema,
  CompleteRequestSchema,
  GetPromptRequestSchema,
  ListPromptsRequestSchema,
  ListResourceTemplatesRequestSchema,
  ListResourcesRequestSchema,
  ListToolsRequestSchema,
  ReadResourceRequestSchema,
  SetLevelRequestSchema,
  SubscribeRequestSchema,
  UnsubscribeRequestSchema,
  ElicitResultSchema,
  CreateMessageResultSchema,
  isInitializeRequest,
} from '@modelcontextprotocol/sdk/types.js';

// A 1x1 red PNG and a tiny silent WAV, base64.
const PNG =
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==';
const WAV = 'UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQAAAAA=';

// How long a tool waits for the client to answer its request: a client that never gets the
// request (a front that drops it) then sees the tool fail in seconds, not at its own timeout.
const ASK = { timeout: 5000 };
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const noArgs = { type: 'object', properties: {} };
const text = (t) => ({ content: [{ type: 'text', text: t }] });

const TOOLS = [
  { name: 'test_simple_text', description: 'Returns simple text', inputSchema: noArgs },
  { name: 'test_image_content', description: 'Returns an image', inputSchema: noArgs },
  { name: 'test_audio_content', description: 'Returns audio', inputSchema: noArgs },
  { name: 'test_embedded_resource', description: 'Returns an embedded resource', inputSchema: noArgs },
  { name: 'test_multiple_content_types', description: 'Returns text, image and resource', inputSchema: noArgs },
  { name: 'test_tool_with_logging', description: 'Logs three messages while it runs', inputSchema: noArgs },
  { name: 'test_tool_with_progress', description: 'Reports progress while it runs', inputSchema: noArgs },
  { name: 'test_error_handling', description: 'Always fails', inputSchema: noArgs },
  {
    name: 'test_sampling',
    description: 'Asks the client to sample',
    inputSchema: { type: 'object', properties: { prompt: { type: 'string' } }, required: ['prompt'] },
  },
  {
    name: 'test_elicitation',
    description: 'Asks the user for input',
    inputSchema: { type: 'object', properties: { message: { type: 'string' } }, required: ['message'] },
  },
  { name: 'test_elicitation_sep1034_defaults', description: 'Elicitation with defaults', inputSchema: noArgs },
  { name: 'test_elicitation_sep1330_enums', description: 'Elicitation with enums', inputSchema: noArgs },
  { name: 'test_reconnection', description: 'Closes its SSE stream before answering', inputSchema: noArgs },
  {
    name: 'json_schema_2020_12_tool',
    description: 'Tool with JSON Schema 2020-12 features',
    inputSchema: {
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      type: 'object',
      $defs: {
        address: {
          type: 'object',
          properties: { street: { type: 'string' }, city: { type: 'string' } },
        },
      },
      properties: { name: { type: 'string' }, address: { $ref: '#/$defs/address' } },
      additionalProperties: false,
    },
  },
];

function makeServer() {
  const server = new Server(
    { name: 'toolonce-conformance-reference', version: '1.0.0' },
    {
      capabilities: {
        tools: {},
        resources: { subscribe: true },
        prompts: {},
        logging: {},
        completions: {},
      },
    },
  );
  const subscriptions = new Set();

  server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: TOOLS }));
  server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    const args = request.params.arguments ?? {};
    switch (request.params.name) {
      case 'test_simple_text':
        return text('This is a simple text response for testing.');
      case 'test_image_content':
        return { content: [{ type: 'image', data: PNG, mimeType: 'image/png' }] };
      case 'test_audio_content':
        return { content: [{ type: 'audio', data: WAV, mimeType: 'audio/wav' }] };
      case 'test_embedded_resource':
        return {
          content: [
            {
              type: 'resource',
              resource: {
                uri: 'test://embedded-resource',
                mimeType: 'text/plain',
                text: 'This is an embedded resource content.',
              },
            },
          ],
        };
      case 'test_multiple_content_types':
        return {
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
        };
      case 'test_tool_with_logging':
        for (const [i, data] of ['Tool execution started', 'Tool processing data', 'Tool execution completed'].entries()) {
          if (i > 0) await sleep(50);
          await extra.sendNotification({ method: 'notifications/message', params: { level: 'info', data } });
        }
        return text('Tool with logging executed successfully');
      case 'test_tool_with_progress': {
        const progressToken = request.params._meta?.progressToken;
        for (const [i, progress] of [0, 50, 100].entries()) {
          if (i > 0) await sleep(50);
          if (progressToken !== undefined) {
            await extra.sendNotification({
              method: 'notifications/progress',
              params: { progressToken, progress, total: 100, message: `Completed step ${i + 1} of 3` },
            });
          }
        }
        return text('Tool with progress executed successfully');
      }
      case 'test_error_handling':
        return { isError: true, ...text('This tool intentionally returns an error for testing') };
      case 'test_sampling': {
        const answer = await extra.sendRequest(
          {
            method: 'sampling/createMessage',
            params: {
              messages: [{ role: 'user', content: { type: 'text', text: args.prompt } }],
              maxTokens: 100,
            },
          },
          CreateMessageResultSchema,
          ASK,
        );
        const said = answer.content?.type === 'text' ? answer.content.text : JSON.stringify(answer.content);
        return text(`LLM response: ${said}`);
      }
      case 'test_elicitation': {
        const answer = await extra.sendRequest(
          {
            method: 'elicitation/create',
            params: {
              message: args.message,
              requestedSchema: {
                type: 'object',
                properties: {
                  username: { type: 'string', description: "User's response" },
                  email: { type: 'string', description: "User's email address" },
                },
                required: ['username', 'email'],
              },
            },
          },
          ElicitResultSchema,
          ASK,
        );
        return text(`User response: action=${answer.action}, content=${JSON.stringify(answer.content ?? {})}`);
      }
      case 'test_elicitation_sep1034_defaults': {
        const answer = await extra.sendRequest(
          {
            method: 'elicitation/create',
            params: {
              message: 'Please review and update the form fields with defaults',
              requestedSchema: {
                type: 'object',
                properties: {
                  name: { type: 'string', description: 'User name', default: 'John Doe' },
                  age: { type: 'integer', description: 'User age', default: 30 },
                  score: { type: 'number', description: 'User score', default: 95.5 },
                  status: {
                    type: 'string',
                    description: 'User status',
                    enum: ['active', 'inactive', 'pending'],
                    default: 'active',
                  },
                  verified: { type: 'boolean', description: 'Verification status', default: true },
                },
                required: [],
              },
            },
          },
          ElicitResultSchema,
          ASK,
        );
        return text(`Elicitation completed: action=${answer.action}, content=${JSON.stringify(answer.content ?? {})}`);
      }
      case 'test_elicitation_sep1330_enums': {
        const answer = await extra.sendRequest(
          {
            method: 'elicitation/create',
            params: {
              message: 'Please select options from the enum fields',
              requestedSchema: {
                type: 'object',
                properties: {
                  untitledSingle: { type: 'string', description: 'Untitled single-select', enum: ['option1', 'option2', 'option3'] },
                  titledSingle: {
                    type: 'string',
                    description: 'Titled single-select',
                    oneOf: [
                      { const: 'value1', title: 'First Option' },
                      { const: 'value2', title: 'Second Option' },
                      { const: 'value3', title: 'Third Option' },
                    ],
                  },
                  legacyEnum: {
                    type: 'string',
                    description: 'Legacy titled enum',
                    enum: ['opt1', 'opt2', 'opt3'],
                    enumNames: ['Option One', 'Option Two', 'Option Three'],
                  },
                  untitledMulti: {
                    type: 'array',
                    description: 'Untitled multi-select',
                    items: { type: 'string', enum: ['option1', 'option2', 'option3'] },
                  },
                  titledMulti: {
                    type: 'array',
                    description: 'Titled multi-select',
                    items: {
                      anyOf: [
                        { const: 'value1', title: 'First Choice' },
                        { const: 'value2', title: 'Second Choice' },
                        { const: 'value3', title: 'Third Choice' },
                      ],
                    },
                  },
                },
                required: [],
              },
            },
          },
          ElicitResultSchema,
          ASK,
        );
        return text(`Elicitation completed: action=${answer.action}, content=${JSON.stringify(answer.content ?? {})}`);
      }
      case 'test_reconnection':
        // Over HTTP, end this call's event stream first: the answer then reaches only a client
        // that polls again with Last-Event-ID (SEP-1699). Over stdio there is no stream to end.
        extra.closeSSEStream?.();
        await sleep(100);
        return text('Reconnection test completed successfully');
      case 'json_schema_2020_12_tool':
        return text(`Received: ${JSON.stringify(args)}`);
      default:
        return { isError: true, ...text(`Unknown tool: ${request.params.name}`) };
    }
  });

  server.setRequestHandler(ListResourcesRequestSchema, async () => ({
    resources: [
      { uri: 'test://static-text', name: 'Static text', description: 'A static text resource', mimeType: 'text/plain' },
      { uri: 'test://static-binary', name: 'Static binary', description: 'A static PNG', mimeType: 'image/png' },
      { uri: 'test://watched-resource', name: 'Watched', description: 'A resource one may subscribe to', mimeType: 'text/plain' },
    ],
  }));
  server.setRequestHandler(ListResourceTemplatesRequestSchema, async () => ({
    resourceTemplates: [
      {
        uriTemplate: 'test://template/{id}/data',
        name: 'Template',
        description: 'Data for an id',
        mimeType: 'application/json',
      },
    ],
  }));
  server.setRequestHandler(ReadResourceRequestSchema, async (request) => {
    const uri = request.params.uri;
    if (uri === 'test://static-text') {
      return { contents: [{ uri, mimeType: 'text/plain', text: 'This is the content of the static text resource.' }] };
    }
    if (uri === 'test://static-binary') {
      return { contents: [{ uri, mimeType: 'image/png', blob: PNG }] };
    }
    if (uri === 'test://watched-resource') {
      return { contents: [{ uri, mimeType: 'text/plain', text: 'Watched resource content.' }] };
    }
    const templated = /^test:\/\/template\/([^/]+)\/data$/.exec(uri);
    if (templated) {
      const id = templated[1];
      return {
        contents: [
          {
            uri,
            mimeType: 'application/json',
            text: JSON.stringify({ id, templateTest: true, data: `Data for ID: ${id}` }),
          },
        ],
      };
    }
    throw new Error(`Resource not found: ${uri}`);
  });
  server.setRequestHandler(SubscribeRequestSchema, async (request) => {
    subscriptions.add(request.params.uri);
    return {};
  });
  server.setRequestHandler(UnsubscribeRequestSchema, async (request) => {
    subscriptions.delete(request.params.uri);
    return {};
  });

  server.setRequestHandler(ListPromptsRequestSchema, async () => ({
    prompts: [
      { name: 'test_simple_prompt', description: 'A prompt without arguments' },
      {
        name: 'test_prompt_with_arguments',
        description: 'A prompt with two arguments',
        arguments: [
          { name: 'arg1', description: 'First test argument', required: true },
          { name: 'arg2', description: 'Second test argument', required: true },
        ],
      },
      {
        name: 'test_prompt_with_embedded_resource',
        description: 'A prompt embedding a resource',
        arguments: [{ name: 'resourceUri', description: 'URI of the resource to embed', required: true }],
      },
      { name: 'test_prompt_with_image', description: 'A prompt with an image' },
    ],
  }));
  server.setRequestHandler(GetPromptRequestSchema, async (request) => {
    const args = request.params.arguments ?? {};
    const user = (content) => ({ role: 'user', content });
    switch (request.params.name) {
      case 'test_simple_prompt':
        return { messages: [user({ type: 'text', text: 'This is a simple prompt for testing.' })] };
      case 'test_prompt_with_arguments':
        return {
          messages: [user({ type: 'text', text: `Prompt with arguments: arg1='${args.arg1}', arg2='${args.arg2}'` })],
        };
      case 'test_prompt_with_embedded_resource':
        return {
          messages: [
            user({
              type: 'resource',
              resource: { uri: args.resourceUri, mimeType: 'text/plain', text: 'Embedded resource content for testing.' },
            }),
            user({ type: 'text', text: 'Please process the embedded resource above.' }),
          ],
        };
      case 'test_prompt_with_image':
        return {
          messages: [
            user({ type: 'image', data: PNG, mimeType: 'image/png' }),
            user({ type: 'text', text: 'Please analyze the image above.' }),
          ],
        };
      default:
        throw new Error(`Unknown prompt: ${request.params.name}`);
    }
  });

  server.setRequestHandler(CompleteRequestSchema, async () => ({
    completion: { values: ['paris', 'park', 'party'], total: 3, hasMore: false },
  }));
  server.setRequestHandler(SetLevelRequestSchema, async () => ({}));
  return server;
}

if (process.argv[2] === 'stdio') {
  await makeServer().connect(new StdioServerTransport());
} else if (process.argv[2] === 'http') {
  const transports = new Map();
  let allowedHosts = [];
  const httpServer = http.createServer(async (req, res) => {
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
    let transport = sessionId === undefined ? undefined : transports.get(sessionId);
    if (transport === undefined && sessionId === undefined && req.method === 'POST' && isInitializeRequest(body)) {
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        eventStore: new InMemoryEventStore(),
        retryInterval: 200,
        enableDnsRebindingProtection: true,
        allowedHosts,
        allowedOrigins: allowedHosts.map((h) => `http://${h}`),
        onsessioninitialized: (id) => transports.set(id, transport),
      });
      transport.onclose = () => transports.delete(transport.sessionId);
      await makeServer().connect(transport);
    }
    if (transport === undefined) {
      res.writeHead(sessionId === undefined ? 400 : 404, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32000, message: 'No valid session' }, id: null }));
      return;
    }
    await transport.handleRequest(req, res, body);
  });
  httpServer.listen(0, '127.0.0.1', () => {
    const port = httpServer.address().port;
    allowedHosts = [`127.0.0.1:${port}`, `localhost:${port}`, `[::1]:${port}`];
    console.log(`PORT=${port}`);
  });
} else {
  console.error('usage: mcp_conformance_server.mjs stdio|http');
  process.exit(2);
}
