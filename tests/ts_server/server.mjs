// A stock MCP server of the official TypeScript SDK (@modelcontextprotocol/sdk, McpServer over
// StreamableHTTPServerTransport, stateful sessions, SSE answers, no event store), run as its own
// process by tests/test_proxy_e2e.py behind `mcp-resume proxy`. Nothing here knows of resumes.
//
//   node server.mjs [--port N]     prints "READY <port>" once it listens on 127.0.0.1
//
// Tools: echo(text) -> text; slow_progress(seconds, steps) -> "done <steps>" after <steps>
// progress notifications (i, steps) spread over <seconds>. GET /__stats__ answers how often each
// tool ran ({"echo": n, "slow_progress": n}), for the tests that count runs.
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';

const args = process.argv.slice(2);
const port = args.includes('--port') ? Number(args[args.indexOf('--port') + 1]) : 0;
const runs = { echo: 0, slow_progress: 0 };
const transports = new Map();

function newServer() {
  const server = new McpServer({ name: 'ts-sdk-test-server', version: '1.0.0' });
  server.registerTool(
    'echo',
    { description: 'Return the text', inputSchema: { text: z.string() } },
    async ({ text }) => {
      runs.echo += 1;
      return { content: [{ type: 'text', text }] };
    },
  );
  server.registerTool(
    'slow_progress',
    {
      description: 'Report progress steps over some seconds, then say done',
      inputSchema: { seconds: z.number().default(3), steps: z.number().int().default(30) },
    },
    async ({ seconds, steps }, extra) => {
      runs.slow_progress += 1;
      const token = extra._meta?.progressToken;
      for (let i = 1; i <= steps; i++) {
        await new Promise((resolve) => setTimeout(resolve, (seconds * 1000) / steps));
        if (token !== undefined) {
          await extra.sendNotification({
            method: 'notifications/progress',
            params: { progressToken: token, progress: i, total: steps, message: `step ${i}` },
          });
        }
      }
      return { content: [{ type: 'text', text: `done ${steps}` }] };
    },
  );
  return server;
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      try {
        resolve(text ? JSON.parse(text) : undefined);
      } catch {
        resolve(null);
      }
    });
    req.on('error', reject);
  });
}

function jsonError(res, status, message) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32000, message } }));
}

const httpServer = http.createServer(async (req, res) => {
  res.on('finish', () => {
    // On stderr, which the test shows when it fails: what the server refused, and why.
    if (res.statusCode >= 400) console.error(`${req.method} ${req.url} -> ${res.statusCode}`, JSON.stringify(req.headers));
  });
  try {
    const url = new URL(req.url, 'http://localhost');
    if (url.pathname === '/__stats__') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(runs));
      return;
    }
    if (url.pathname !== '/mcp') {
      jsonError(res, 404, 'not found');
      return;
    }
    const sessionId = req.headers['mcp-session-id'];
    const body = req.method === 'POST' ? await readBody(req) : undefined;
    if (body === null) {
      jsonError(res, 400, 'Parse error');
      return;
    }
    let transport = sessionId ? transports.get(sessionId) : undefined;
    if (!transport) {
      if (sessionId || req.method !== 'POST' || !isInitializeRequest(body)) {
        jsonError(res, sessionId ? 404 : 400, sessionId ? 'Session not found' : 'Bad Request: No valid session ID provided');
        return;
      }
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (id) => transports.set(id, transport),
      });
      transport.onclose = () => {
        if (transport.sessionId) transports.delete(transport.sessionId);
      };
      await newServer().connect(transport);
    }
    await transport.handleRequest(req, res, body);
  } catch (error) {
    console.error('request failed:', error);
    if (!res.headersSent) jsonError(res, 500, 'Internal server error');
  }
});

httpServer.listen(port, '127.0.0.1', () => {
  process.stdout.write(`READY ${httpServer.address().port}\n`);
});
process.stdin.on('end', () => process.exit(0)); // the test process went away
process.stdin.resume();
process.on('SIGTERM', () => process.exit(0));
