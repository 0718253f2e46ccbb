#!/usr/bin/env node
// Many sessions of the official TypeScript MCP SDK client (@modelcontextprotocol/sdk, pinned in
// package.json) in one process, run by tests/test_ts_session_adoption.py while a node of the
// service leaves.
//
//   node sessions.mjs <mcp-url> [--sessions N] [--seconds S] [--steps N] [--timeout-ms MS]
//
// Each session connects (its own Client and StreamableHTTPClientTransport, stock reconnection
// options), then calls slow_progress(seconds, steps) with an onprogress callback. Once every
// session has had a progress event, the script prints the line `STREAMING` and waits for a line
// `GO` on stdin (the test signals the node meanwhile). Once its first call is answered and GO
// came, each session lists the tools and makes a second call (slow_progress(0.1, 2)) on the same
// session. Then it asks the server for a log message on the session's GET stream (notify_later)
// and waits up to 10 s for it: the GET stream must have carried on from the node that took the
// session over. Every request goes on a connection of its own (`connection: close`), as a load
// balancer spreading requests over nodes sees them; the `x-node` header of the answer to its
// `initialize` says which node a session opened on.
//
// Prints ONE JSON line on stdout at the end ({"goAtMs": ..., "sessions": [...]}: when GO came, and
// per session its node, first result, progress, tools listed, second result and when it came,
// the log messages its GET stream brought after the second call, errors; times in ms from the start) and exits 0.

import { createInterface } from 'node:readline';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

function parseArgs(argv) {
    const opts = { sessions: 10, seconds: 3, steps: 20, timeoutMs: 120000 };
    const rest = [];
    for (let i = 0; i < argv.length; i++) {
        const a = argv[i];
        const next = () => {
            if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
            return Number(argv[++i]);
        };
        if (a === '--sessions') opts.sessions = next();
        else if (a === '--seconds') opts.seconds = next();
        else if (a === '--steps') opts.steps = next();
        else if (a === '--timeout-ms') opts.timeoutMs = next();
        else if (a.startsWith('--')) throw new Error(`unknown option ${a}`);
        else rest.push(a);
    }
    if (rest.length !== 1) throw new Error('usage: node sessions.mjs <mcp-url> [options]');
    opts.url = rest[0];
    return opts;
}

const opts = parseArgs(process.argv.slice(2));
const t0 = performance.now();
const now = () => Math.round(performance.now() - t0);

// The line GO on stdin: the test has signalled the node.
let go;
let goAtMs = null;
const goCame = new Promise((resolve) => (go = resolve));
createInterface({ input: process.stdin }).on('line', (line) => {
    if (line.trim() === 'GO' && goAtMs === null) {
        goAtMs = now();
        go();
    }
});

function resultText(result) {
    return (result.content ?? [])
        .filter((c) => c.type === 'text')
        .map((c) => c.text)
        .join('');
}

const summaries = [];
let streaming = 0;
let announced = false;

async function oneSession(index) {
    const s = {
        index,
        node: null,
        first: null,
        progress: [],
        tools: null,
        second: null,
        secondAtMs: null,
        logs: [],
        errors: [],
        transportErrors: [],
    };
    summaries.push(s);
    let initializing = true;
    // A connection per request, and the node that answered the session's initialize.
    const fetchOnce = async (input, init = {}) => {
        const headers = new Headers(init.headers);
        headers.set('connection', 'close');
        const response = await fetch(input, { ...init, headers });
        if (initializing && (init.method ?? 'GET').toUpperCase() === 'POST') {
            initializing = false;
            s.node = Number(response.headers.get('x-node')) || null;
        }
        return response;
    };
    const transport = new StreamableHTTPClientTransport(new URL(opts.url), { fetch: fetchOnce });
    const client = new Client({ name: `mcp-resume-asgi-ts-session-${index}`, version: '0.0.1' });
    let logged = () => {};
    let listening = false;
    client.setNotificationHandler(LoggingMessageNotificationSchema, (notification) => {
        if (listening) {
            s.logs.push(notification.params.data);
            logged();
        }
    });
    client.onerror = (error) => {
        if (s.transportErrors.length < 20) s.transportErrors.push(String(error?.message ?? error));
    };
    try {
        await client.connect(transport);
        const first = client.callTool(
            { name: 'slow_progress', arguments: { seconds: opts.seconds, steps: opts.steps } },
            undefined,
            {
                onprogress: (p) => {
                    if (s.progress.length === 0 && ++streaming === opts.sessions && !announced) {
                        announced = true;
                        process.stdout.write('STREAMING\n');
                    }
                    s.progress.push(p.progress);
                },
                resetTimeoutOnProgress: true,
                timeout: 30000,
                maxTotalTimeout: opts.timeoutMs,
            }
        );
        try {
            s.first = resultText(await first);
        } catch (error) {
            s.first = `error: ${error?.message ?? error}`;
        }
        await goCame;
        try {
            const listed = await client.listTools(undefined, { timeout: 30000 });
            s.tools = listed.tools.map((tool) => tool.name);
            const second = await client.callTool(
                { name: 'slow_progress', arguments: { seconds: 0.1, steps: 2 } },
                undefined,
                { timeout: 30000 }
            );
            s.second = resultText(second);
            s.secondAtMs = now();
        } catch (error) {
            s.second = `error: ${error?.message ?? error}`;
        }
        try {
            listening = true;
            const arrived = new Promise((resolve) => (logged = resolve));
            await client.callTool(
                { name: 'notify_later', arguments: { count: 1, interval: 0.01, wait: true } },
                undefined,
                { timeout: 30000 }
            );
            await Promise.race([arrived, new Promise((resolve) => setTimeout(resolve, 10000))]);
        } catch (error) {
            s.errors.push(`notify_later: ${error?.message ?? error}`);
        }
        try {
            await transport.terminateSession();
        } catch (error) {
            s.errors.push(`terminateSession: ${error?.message ?? error}`);
        }
        await client.close();
    } catch (error) {
        s.errors.push(`exception: ${error?.stack ?? error}`);
    }
}

const watchdog = setTimeout(() => {
    process.stdout.write(JSON.stringify({ watchdog: opts.timeoutMs, sessions: summaries }) + '\n', () =>
        process.exit(1)
    );
}, opts.timeoutMs);

await Promise.all(Array.from({ length: opts.sessions }, (_, i) => oneSession(i)));
clearTimeout(watchdog);
process.stdout.write(JSON.stringify({ goAtMs, sessions: summaries }) + '\n', () => process.exit(0));
