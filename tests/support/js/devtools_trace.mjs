// Loads a Chrome trace (JSON object form) into Chrome DevTools' trace engine
// (the Performance panel's model, npm @paulirish/trace_engine) and prints
// what it made of it as one JSON line. Usage: node devtools_trace.mjs ENGINE_DIR TRACE.json
import fs from 'node:fs';
import path from 'node:path';
import {pathToFileURL} from 'node:url';

const [engineDir, tracePath] = process.argv.slice(2);
// the engine measures layout rectangles on some traces; node has no DOMRect
globalThis.DOMRect ??= class DOMRect {
  constructor(x = 0, y = 0, width = 0, height = 0) { Object.assign(this, {x, y, width, height}); }
};
const Trace = await import(pathToFileURL(path.join(engineDir, 'models', 'trace', 'trace.js')).href);
const doc = JSON.parse(fs.readFileSync(tracePath, 'utf8'));
const events = Array.isArray(doc) ? doc : doc.traceEvents;
const model = Trace.TraceModel.Model.createWithAllHandlers();
await model.parse(events);
const parsed = model.parsedTrace();
if (!parsed) throw new Error('the trace engine made nothing of the trace');
const meta = parsed.data.Meta;
const processes = {};
for (const [pid, ev] of meta.processNames) processes[pid] = ev.args.name;
console.log(JSON.stringify({
  processes,
  bounds: {min: meta.traceBounds.min, max: meta.traceBounds.max, range: meta.traceBounds.range},
  generic: meta.traceIsGeneric,
  events: parsed.traceEvents.length,
}));
