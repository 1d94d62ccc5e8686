// An MCP server on the official TypeScript SDK (@modelcontextprotocol/sdk, McpServer) with the
// same three tools as tests/sdk/mcp_server.py: `sleep_ms` sleeps a known time, `count` sends
// progress notifications, `fail` returns a tool error (isError).
//
// Transports (--transport):
//   streamable  Streamable HTTP at /mcp, one session per `initialize`, answers on SSE streams.
//               With --resumable, an event store keeps every event (ids on the wire, a priming
//               event with `retry:`), and `count` closes its request's stream after its first
//               progress notification: the client resumes it with a GET carrying Last-Event-ID,
//               on which the rest (more progress, the response) arrives.
//   sse         the older HTTP+SSE transport: GET /sse announces the POST endpoint
//               (/messages?sessionId=…) in an `endpoint` event; POSTs are answered 202 and every
//               response arrives on the GET stream.
//
// It logs its own time per JSON-RPC request, from the request's head reaching the Node HTTP
// server to the write carrying the response (on whichever response stream that happens), as one
// JSON line per request in --log: {"method", "id", "name", "in_ns", "out_ns", "sent_ns",
// "is_error"} (process.hrtime, monotonic): `out_ns` just before the write was handed to Node,
// `sent_ns` when Node reported it handed to the socket; the bytes left between the two. Sockets get TCP_NODELAY.
// It prints "mcp server listening on http://127.0.0.1:PORT/PATH" once it accepts connections.
//
// Usage: node mcp_server.mjs --log FILE [--transport streamable|sse] [--resumable]

import { randomUUID } from 'node:crypto';
import { appendFileSync } from 'node:fs';
import http from 'node:http';
import { parseArgs } from 'node:util';

import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { SSEServerTransport } from '@modelcontextprotocol/sdk/server/sse.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { z } from 'zod';

const { values: args } = parseArgs({
    options: {
        log: { type: 'string' },
        transport: { type: 'string', default: 'streamable' },
        resumable: { type: 'boolean', default: false }
    }
});
if (!args.log) {
    console.error('usage: mcp_server.mjs --log FILE [--transport streamable|sse] [--resumable]');
    process.exit(2);
}

const now = () => process.hrtime.bigint();
const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

/** Events kept per stream for replay after a Last-Event-ID (the SDK's EventStore interface). */
class Events {
    constructor() {
        this.list = [];
    }
    async storeEvent(streamId, message) {
        const eventId = `${streamId}:${this.list.length}`;
        this.list.push({ eventId, streamId, message });
        return eventId;
    }
    async getStreamIdForEventId(eventId) {
        return this.list.find(e => e.eventId === eventId)?.streamId;
    }
    async replayEventsAfter(lastEventId, { send }) {
        const at = this.list.findIndex(e => e.eventId === lastEventId);
        if (at < 0) return '';
        const streamId = this.list[at].streamId;
        for (const e of this.list.slice(at + 1)) {
            // The priming event stores no message: nothing to send again.
            if (e.streamId === streamId && e.message && Object.keys(e.message).length > 0) {
                await send(e.eventId, e.message);
            }
        }
        return streamId;
    }
}

function buildServer() {
    const server = new McpServer({ name: 'tokentap-e2e-ts', version: '1.0.0' });
    server.registerTool(
        'sleep_ms',
        { description: 'Sleeps `ms` milliseconds.', inputSchema: { ms: z.number().int() } },
        async ({ ms }) => {
            await sleep(ms);
            return { content: [{ type: 'text', text: `slept ${ms} ms` }] };
        }
    );
    server.registerTool(
        'count',
        { description: 'Counts to n, one progress notification every 20 ms.', inputSchema: { n: z.number().int() } },
        async ({ n }, extra) => {
            const token = extra._meta?.progressToken;
            for (let i = 1; i <= n; i++) {
                await sleep(20);
                if (token !== undefined) {
                    await extra.sendNotification({
                        method: 'notifications/progress',
                        params: { progressToken: token, progress: i, total: n, message: `step ${i}` }
                    });
                }
                // Resumable: after the first notification the stream closes; the client comes
                // back with Last-Event-ID and gets the rest on its GET.
                if (i === 1 && args.resumable && extra.closeSSEStream) {
                    extra.closeSSEStream();
                }
            }
            return { content: [{ type: 'text', text: `counted to ${n}` }] };
        }
    );
    server.registerTool(
        'fail',
        { description: 'Fails with `reason` (a tool error: isError true).', inputSchema: { reason: z.string() } },
        async ({ reason }) => ({ content: [{ type: 'text', text: reason }], isError: true })
    );
    return server;
}

// The server's own timing: requests by id, waiting for the write that carries their response.
const pending = new Map();

function noteRequests(body, inNs) {
    for (const m of Array.isArray(body) ? body : [body]) {
        if (m && typeof m === 'object' && 'method' in m && 'id' in m) {
            pending.set(JSON.stringify(m.id), { method: m.method, id: m.id, name: m.params?.name ?? null, in_ns: inNs });
        }
    }
}

function noteWrite(chunk, outNs, sentNs) {
    if (pending.size === 0 || chunk === undefined || chunk === null || typeof chunk === 'function') return;
    const text = Buffer.isBuffer(chunk) || chunk instanceof Uint8Array ? Buffer.from(chunk).toString('utf8') : String(chunk);
    for (const raw of text.split(/\r?\n/)) {
        const line = raw.startsWith('data:') ? raw.slice(5).trim() : raw.trim();
        if (!line.startsWith('{') && !line.startsWith('[')) continue;
        let message;
        try {
            message = JSON.parse(line);
        } catch {
            continue;
        }
        for (const m of Array.isArray(message) ? message : [message]) {
            if (!m || typeof m !== 'object' || 'method' in m || !('result' in m || 'error' in m)) continue;
            const key = JSON.stringify(m.id);
            const entry = pending.get(key);
            if (!entry) continue;
            pending.delete(key);
            const line = {
                ...entry,
                in_ns: Number(entry.in_ns),
                out_ns: Number(outNs),
                sent_ns: Number(sentNs),
                is_error: Boolean(m.result?.isError)
            };
            appendFileSync(args.log, JSON.stringify(line) + '\n');
        }
    }
}

/** Every write of a response is stamped twice: just before it is handed to Node (`out_ns`), and
 * when Node has handed it to the socket (`sent_ns`, its callback). Node defers a response chunk's
 * socket write (it corks until the next tick) and runs the callback later still, so under load
 * the bytes leave somewhere between the two. */
function tapResponse(res) {
    const write = res.write.bind(res);
    const end = res.end.bind(res);
    const stamped = (original, chunk, rest) => {
        const t = now();
        const callback = typeof rest[rest.length - 1] === 'function' ? rest.pop() : undefined;
        return original(chunk, ...rest, error => {
            noteWrite(chunk, t, now());
            if (callback) callback(error);
        });
    };
    res.write = (chunk, ...rest) => stamped(write, chunk, rest);
    res.end = (chunk, ...rest) => (typeof chunk === 'function' ? end(chunk) : stamped(end, chunk, rest));
}

function readBody(req) {
    return new Promise((resolve, reject) => {
        const parts = [];
        req.on('data', c => parts.push(c));
        req.on('end', () => resolve(Buffer.concat(parts)));
        req.on('error', reject);
    });
}

function jsonError(res, status, message) {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32000, message }, id: null }));
}

const sessions = new Map();
const events = new Events();

async function streamable(req, res, body) {
    const sessionId = req.headers['mcp-session-id'];
    let transport = sessionId ? sessions.get(sessionId) : undefined;
    if (sessionId && !transport) return jsonError(res, 404, 'Session not found');
    if (!transport) {
        if (req.method !== 'POST') return jsonError(res, 400, 'No session');
        transport = new StreamableHTTPServerTransport({
            sessionIdGenerator: () => randomUUID(),
            eventStore: args.resumable ? events : undefined,
            retryInterval: args.resumable ? 10 : undefined,
            onsessioninitialized: id => sessions.set(id, transport)
        });
        transport.onclose = () => {
            if (transport.sessionId) sessions.delete(transport.sessionId);
        };
        await buildServer().connect(transport);
    }
    await transport.handleRequest(req, res, body);
}

async function legacySse(req, res, url, body) {
    if (req.method === 'GET' && url.pathname === '/sse') {
        const transport = new SSEServerTransport('/messages', res);
        sessions.set(transport.sessionId, transport);
        res.on('close', () => sessions.delete(transport.sessionId));
        await buildServer().connect(transport);
        return;
    }
    if (req.method === 'POST' && url.pathname === '/messages') {
        const transport = sessions.get(url.searchParams.get('sessionId') ?? '');
        if (!transport) return jsonError(res, 404, 'Session not found');
        await transport.handlePostMessage(req, res, body);
        return;
    }
    res.writeHead(404).end();
}

const httpServer = http.createServer({ noDelay: true }, async (req, res) => {
    const inNs = now();
    tapResponse(res);
    try {
        const url = new URL(req.url ?? '/', 'http://127.0.0.1');
        let body;
        if (req.method === 'POST') {
            const raw = await readBody(req);
            try {
                body = JSON.parse(raw.toString('utf8'));
            } catch {
                return jsonError(res, 400, 'Parse error');
            }
            noteRequests(body, inNs);
        }
        if (args.transport === 'sse') {
            await legacySse(req, res, url, body);
        } else if (url.pathname === '/mcp') {
            await streamable(req, res, body);
        } else {
            res.writeHead(404).end();
        }
    } catch (e) {
        console.error(e);
        if (!res.headersSent) jsonError(res, 500, String(e));
    }
});
httpServer.on('connection', socket => socket.setNoDelay(true));
httpServer.listen(0, '127.0.0.1', () => {
    const { port } = httpServer.address();
    const path = args.transport === 'sse' ? '/sse' : '/mcp';
    console.log(`mcp server listening on http://127.0.0.1:${port}${path}`);
});
