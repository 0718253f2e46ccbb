#!/usr/bin/env node
// The official TypeScript MCP SDK client (@modelcontextprotocol/sdk, pinned in package.json)
// against a Streamable HTTP server, run by tests/test_ts_client.py.
//
//   node client.mjs <mcp-url> [--scenario progress|elicit|both|rpc-error] [--seconds S] [--steps N]
//                   [--name NAME] [--linger-ms MS] [--timeout-ms MS] [--trace FILE]
//
// "progress": calls slow_progress(seconds, steps) with an onprogress callback
//             (resetTimeoutOnProgress) and expects "done <steps>" and progress 1..steps.
// "elicit":   calls ask_name with a form-elicitation handler answering {name: NAME},
//             expects "hello <NAME>".
// "rpc-error" (not in "both"; a probe): prompts/get of an unknown prompt, which the server answers
//             with a JSON-RPC *error*; then waits --linger-ms and reports how often the transport
//             resumed that request's stream afterwards (SDK 1.x only treats a *result* as the end
//             of a request's stream, see reconnections.byStream["prompts/get#1"]).
//
// The transport uses its stock reconnection behaviour (default reconnectionOptions; it honours
// the server's SSE `retry:` field).  A fetch wrapper only observes the HTTP exchange: it counts
// requests, attributes every SSE event id to the stream it came from (the POST of a JSON-RPC
// request, or the standalone GET stream) and so tells which GET + Last-Event-ID resumes which
// stream.  With --trace FILE it writes every request, response and SSE event as JSON lines.
//
// Prints ONE JSON summary line on stdout and exits 0 when every expectation held, 1 otherwise.

import { appendFileSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema, GetPromptResultSchema } from '@modelcontextprotocol/sdk/types.js';

const HERE = dirname(fileURLToPath(import.meta.url));

function parseArgs(argv) {
    const opts = { scenario: 'both', seconds: 3, steps: 30, name: 'carol', lingerMs: 1000, timeoutMs: 60000, trace: null };
    const rest = [];
    for (let i = 0; i < argv.length; i++) {
        const a = argv[i];
        const next = () => {
            if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
            return argv[++i];
        };
        if (a === '--scenario') opts.scenario = next();
        else if (a === '--seconds') opts.seconds = Number(next());
        else if (a === '--steps') opts.steps = Number(next());
        else if (a === '--name') opts.name = next();
        else if (a === '--linger-ms') opts.lingerMs = Number(next());
        else if (a === '--timeout-ms') opts.timeoutMs = Number(next());
        else if (a === '--trace') opts.trace = next();
        else if (a.startsWith('--')) throw new Error(`unknown option ${a}`);
        else rest.push(a);
    }
    if (rest.length !== 1) throw new Error('usage: node client.mjs <mcp-url> [options]');
    if (!['progress', 'elicit', 'both', 'rpc-error'].includes(opts.scenario)) throw new Error(`bad --scenario ${opts.scenario}`);
    opts.url = rest[0];
    return opts;
}

const opts = parseArgs(process.argv.slice(2));
const sdkVersion = JSON.parse(
    readFileSync(join(HERE, 'node_modules', '@modelcontextprotocol', 'sdk', 'package.json'), 'utf8')
).version;
const t0 = performance.now();
const now = () => Math.round(performance.now() - t0);

// ------------------------------------------------------------------------------------ trace

if (opts.trace) writeFileSync(opts.trace, '');
function trace(record) {
    if (opts.trace) appendFileSync(opts.trace, JSON.stringify({ t: now(), ...record }) + '\n');
}

// ------------------------------------------------------------------- observing fetch wrapper

const stats = {
    requests: {}, // "POST", "GET", "GET resume", "DELETE" -> count
    statuses: {}, // "GET resume 200" -> count
    resumesByStream: {}, // stream label -> number of GET + Last-Event-ID for it
    primingEvents: 0, // events with an id and no data
    retryValues: [], // distinct retry: values seen
    streamEnds: { closed: 0, errored: 0, abortedByClient: 0 }, // errored: broken while in use
};
let closing = false; // set when the client starts tearing its session down
const eventOrigin = new Map(); // event id -> stream label
const resumeIds = {}; // stream label -> every Last-Event-ID sent to resume it, in order
let requestCounter = 0;

const bump = (obj, key) => (obj[key] = (obj[key] ?? 0) + 1);
const short = (s) => (s && s.length > 24 ? `${s.slice(0, 12)}…${s.slice(-8)}` : s);

function describeBody(body) {
    if (typeof body !== 'string') return {};
    try {
        const msg = JSON.parse(body);
        if (Array.isArray(msg)) return { batch: msg.length };
        if (msg.method === undefined) return { rpcResponseTo: msg.id };
        return { rpcMethod: msg.method, rpcId: msg.id };
    } catch {
        return {};
    }
}

// A pass-through transform that parses SSE framing just enough to see ids, retry and data.
function sseObserver(n, label) {
    const decoder = new TextDecoder();
    let buf = '';
    let ev = { id: undefined, retry: undefined, data: [], comment: false };
    const flush = () => {
        if (ev.id === undefined && ev.retry === undefined && ev.data.length === 0) {
            ev = { id: undefined, retry: undefined, data: [], comment: false };
            return;
        }
        const data = ev.data.join('\n');
        if (ev.id !== undefined && ev.id !== '') eventOrigin.set(ev.id, label);
        if (ev.id && data === '') stats.primingEvents++;
        let summary;
        if (data) {
            try {
                const m = JSON.parse(data);
                summary = m.method
                    ? `${m.method}${m.params?.progress !== undefined ? ` ${m.params.progress}` : ''}`
                    : `response id=${m.id}${m.error ? ' error' : ''}`;
            } catch {
                summary = `non-JSON data (${data.length} chars)`;
            }
        }
        trace({ n, sse: { id: short(ev.id), retry: ev.retry, data: summary ?? '' } });
        ev = { id: undefined, retry: undefined, data: [], comment: false };
    };
    const processLine = (line) => {
        if (line === '') return flush();
        if (line.startsWith(':')) return trace({ n, sse: { comment: line.slice(1, 60) } });
        const colon = line.indexOf(':');
        const field = colon === -1 ? line : line.slice(0, colon);
        let value = colon === -1 ? '' : line.slice(colon + 1);
        if (value.startsWith(' ')) value = value.slice(1);
        if (field === 'id') ev.id = value;
        else if (field === 'retry') {
            ev.retry = Number(value);
            if (!stats.retryValues.includes(ev.retry)) stats.retryValues.push(ev.retry);
        } else if (field === 'data') ev.data.push(value);
    };
    return new TransformStream({
        transform(chunk, controller) {
            buf += decoder.decode(chunk, { stream: true });
            let idx;
            while ((idx = buf.search(/\r\n|\r|\n/)) !== -1) {
                const sep = buf[idx] === '\r' && buf[idx + 1] === '\n' ? 2 : 1;
                processLine(buf.slice(0, idx));
                buf = buf.slice(idx + sep);
            }
            controller.enqueue(chunk);
        },
        flush() {
            stats.streamEnds.closed++;
            trace({ n, end: 'closed', pendingBytes: buf.length });
        },
    });
}

async function observingFetch(input, init = {}) {
    const n = ++requestCounter;
    const method = (init.method ?? 'GET').toUpperCase();
    const headers = new Headers(init.headers);
    const lastEventId = headers.get('last-event-id');
    const kind = lastEventId ? `${method} resume` : method;
    bump(stats.requests, kind);
    const body = describeBody(init.body);
    let label;
    if (method === 'POST' && body.rpcMethod && body.rpcId !== undefined) label = `${body.rpcMethod}#${body.rpcId}`;
    else if (method === 'GET' && !lastEventId) label = 'standalone GET';
    else if (lastEventId) label = eventOrigin.get(lastEventId) ?? 'unknown stream';
    if (lastEventId) {
        bump(stats.resumesByStream, label);
        (resumeIds[label] ??= []).push(lastEventId);
    }
    trace({
        n,
        request: { method, url: String(input), lastEventId: short(lastEventId), ...body, stream: label },
        requestHeaders: Object.fromEntries(
            [...headers].filter(([k]) => k !== 'authorization').map(([k, v]) => [k, k === 'last-event-id' ? short(v) : v])
        ),
    });
    let response;
    try {
        response = await fetch(input, init);
    } catch (error) {
        trace({ n, fetchError: String(error) });
        throw error;
    }
    bump(stats.statuses, `${kind} ${response.status}`);
    const contentType = response.headers.get('content-type') ?? '';
    trace({ n, response: { status: response.status, headers: Object.fromEntries(response.headers) } });
    if (!response.body || !contentType.startsWith('text/event-stream') || !label) return response;
    const observed = response.body.pipeThrough(sseObserver(n, label), {
        // an aborted/broken connection still surfaces as an error to the SDK's reader
        preventCancel: false,
    });
    // count errors of the underlying body (connection reset) as well
    const [forSdk, forErrors] = observed.tee();
    forErrors
        .pipeTo(new WritableStream())
        .catch((error) => {
            if (closing) stats.streamEnds.abortedByClient++;
            else stats.streamEnds.errored++;
            trace({ n, end: closing ? 'aborted by client' : 'errored', error: String(error?.cause ?? error) });
        });
    return new Response(forSdk, { status: response.status, statusText: response.statusText, headers: response.headers });
}

// ----------------------------------------------------------------------------------- client

const summary = {
    ok: false,
    sdkVersion,
    node: process.version,
    scenario: opts.scenario,
    protocolVersion: null,
    serverInfo: null,
    sessionId: false,
    result: null,
    progress: [],
    progressTotals: [],
    progressMessages: [],
    elicitations: 0,
    elicitResult: null,
    rpcError: null,
    reconnections: null,
    transportErrors: [],
    failures: [],
    elapsedMs: null,
};

function finish(code) {
    summary.elapsedMs = now();
    summary.stats = stats;
    summary.resumeIds = resumeIds;
    summary.reconnections = {
        total: stats.requests['GET resume'] ?? 0,
        toolCall: Object.entries(stats.resumesByStream)
            .filter(([label]) => label.startsWith('tools/call'))
            .reduce((acc, [, count]) => acc + count, 0),
        byStream: stats.resumesByStream,
    };
    process.stdout.write(JSON.stringify(summary) + '\n', () => process.exit(code));
}

const watchdog = setTimeout(() => {
    summary.failures.push(`watchdog: not done after ${opts.timeoutMs} ms`);
    finish(1);
}, opts.timeoutMs);

const transport = new StreamableHTTPClientTransport(new URL(opts.url), { fetch: observingFetch });
const client = new Client(
    { name: 'mcp-resume-asgi-ts-client', version: '0.0.1' },
    { capabilities: { elicitation: { form: {} } } }
);
client.onerror = (error) => {
    if (summary.transportErrors.length < 50) summary.transportErrors.push(String(error?.message ?? error));
};
client.setRequestHandler(ElicitRequestSchema, async (request) => {
    summary.elicitations++;
    trace({ elicitation: request.params.message });
    return { action: 'accept', content: { name: opts.name } };
});

function resultText(result) {
    return (result.content ?? [])
        .filter((c) => c.type === 'text')
        .map((c) => c.text)
        .join('');
}

try {
    await client.connect(transport);
    summary.protocolVersion = transport.protocolVersion ?? null;
    summary.serverInfo = client.getServerVersion() ?? null;
    summary.sessionId = Boolean(transport.sessionId);

    if (opts.scenario === 'progress' || opts.scenario === 'both') {
        const result = await client.callTool(
            { name: 'slow_progress', arguments: { seconds: opts.seconds, steps: opts.steps } },
            undefined,
            {
                onprogress: (p) => {
                    summary.progress.push(p.progress);
                    summary.progressTotals.push(p.total ?? null);
                    summary.progressMessages.push(p.message ?? null);
                },
                resetTimeoutOnProgress: true,
                timeout: 20000,
                maxTotalTimeout: opts.timeoutMs,
            }
        );
        summary.result = resultText(result);
        const expected = Array.from({ length: opts.steps }, (_, i) => i + 1);
        if (summary.result !== `done ${opts.steps}`) summary.failures.push(`result ${JSON.stringify(summary.result)}`);
        if (JSON.stringify(summary.progress) !== JSON.stringify(expected))
            summary.failures.push(`progress ${JSON.stringify(summary.progress)} != 1..${opts.steps}`);
    }
    if (opts.scenario === 'elicit' || opts.scenario === 'both') {
        const result = await client.callTool({ name: 'ask_name', arguments: {} }, undefined, { timeout: 20000 });
        summary.elicitResult = resultText(result);
        if (summary.elicitResult !== `hello ${opts.name}`)
            summary.failures.push(`elicitation result ${JSON.stringify(summary.elicitResult)}`);
        if (summary.elicitations !== 1) summary.failures.push(`${summary.elicitations} elicitation requests`);
    }
    if (opts.scenario === 'rpc-error') {
        try {
            await client.request({ method: 'prompts/get', params: { name: 'no-such-prompt' } }, GetPromptResultSchema);
            summary.failures.push('prompts/get of an unknown prompt succeeded');
        } catch (error) {
            summary.rpcError = String(error?.message ?? error);
        }
        await new Promise((resolve) => setTimeout(resolve, opts.lingerMs));
    }
    closing = true;
    try {
        await transport.terminateSession();
    } catch (error) {
        summary.transportErrors.push(`terminateSession: ${error?.message ?? error}`);
    }
    await client.close();
    summary.ok = summary.failures.length === 0;
} catch (error) {
    summary.failures.push(`exception: ${error?.stack ?? error}`);
}
clearTimeout(watchdog);
finish(summary.ok ? 0 : 1);
