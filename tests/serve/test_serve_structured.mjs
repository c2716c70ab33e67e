// Structured output and tool calls through `kite serve` as a real process on loopback, driven by the
// official `openai` npm client: response_format json_schema / json_object and the grammar field give
// output that parses and validates (ajv, an independent validator; node's own RegExp for a grammar), and
// tool_choice forces a call in each template family's own markup, parsed back into OpenAI tool_calls
// (stream and non-stream give the same calls; the arguments validate against the tool's schema).
// The model has random weights but the real Qwen3 tokenizer (kite gen-model --shape tiny), so nothing
// but the grammar makes its output well-formed: a test that passes shows the constraint at work.
// Run by ctest: node tests/serve/test_serve_structured.mjs (env KITE_BIN, KITE_SOURCE_DIR, KITE_TEST_DATA).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import path from 'node:path';
import fs from 'node:fs';
import os from 'node:os';
import { createRequire } from 'node:module';

const SRC = process.env.KITE_SOURCE_DIR;
const BIN = process.env.KITE_BIN;
const DATA = process.env.KITE_TEST_DATA;
for (const [name, value] of Object.entries({ KITE_SOURCE_DIR: SRC, KITE_BIN: BIN, KITE_TEST_DATA: DATA }))
  if (!value) throw new Error(`${name} is not set (ctest sets it)`);
const oracle = createRequire(path.join(SRC, 'tests/oracle/package.json'));
const { default: OpenAI } = await import(path.join(SRC, 'tests/oracle/node_modules/openai/index.mjs'));
const Ajv = oracle('ajv').default ?? oracle('ajv');
const ajv = new Ajv({ strict: false, allErrors: true });

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'kite-structured-'));
process.on('exit', () => fs.rmSync(work, { recursive: true, force: true }));
const MODEL = path.join(work, 'qwen3-tiny.gguf');
execFileSync(BIN, ['gen-model', '--shape', 'tiny', '--type', 'q8_0', '--tokenizer',
                   path.join(DATA, 'models/tokenizers/qwen3/tokenizer.json'), '--out', MODEL], { stdio: 'ignore' });
const TEMPLATES = path.join(SRC, 'tests/chat_golden/templates');
const qwen3Template = path.join(work, 'qwen3.jinja');
fs.writeFileSync(qwen3Template, JSON.parse(fs.readFileSync(path.join(DATA, 'models/tokenizers/qwen3/tokenizer_config.json'))).chat_template);

async function startServer(template) {
  const proc = spawn(BIN, ['serve', '--model', MODEL, '--port', '0', '--chat-template', template, '--model-name', 'tiny',
                           '--threads', '1', '--parallel', '2', '--ctx', '1024'], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  const base = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`kite serve did not start: ${stderr}`)), 30000);
    proc.stderr.on('data', (d) => {
      stderr += d;
      const m = /listening on (http:\/\/[^ ]+) /.exec(stderr);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`kite serve exited ${code}: ${stderr}`)); });
  });
  const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'none', maxRetries: 0, timeout: 120000 });
  return { proc, base, client, exited, stderr: () => stderr };
}

async function stopServer(server) {
  server.proc.kill('SIGTERM');
  const { code, signal } = await server.exited;
  assert.equal(signal, null, `kite serve died of ${signal}: ${server.stderr()}`);
  assert.equal(code, 0, `kite serve exited ${code}: ${server.stderr()}`);
}

const weather = {
  type: 'function',
  function: {
    name: 'get_weather', description: 'The weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 16 }, unit: { enum: ['celsius', 'fahrenheit'] },
                                                 days: { type: 'integer', minimum: 1, maximum: 7 } },
                  required: ['city', 'unit'], additionalProperties: false },
  },
};
const search = {
  type: 'function',
  function: { name: 'search', parameters: { type: 'object', properties: { query: { type: 'string', maxLength: 24 } }, required: ['query'] } },
};
const messages = [{ role: 'system', content: 'You are a helpful assistant.' }, { role: 'user', content: 'What is the weather in Paris?' }];

// Collects a streamed reply: content, reasoning and tool calls reassembled from their deltas.
async function collect(stream) {
  const out = { content: '', reasoning: '', calls: [], finish: null, roles: 0 };
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (!choice) continue;
    const d = choice.delta;
    if (d.role) out.roles++;
    if (d.content) out.content += d.content;
    if (d.reasoning_content) out.reasoning += d.reasoning_content;
    for (const tc of d.tool_calls ?? []) {
      if (tc.id) {
        assert.equal(tc.index, out.calls.length, 'calls start in index order');
        assert.equal(tc.type, 'function');
        out.calls.push({ id: tc.id, type: 'function', function: { name: tc.function.name, arguments: tc.function.arguments ?? '' } });
      } else {
        assert.ok(out.calls[tc.index], `an argument delta for a call that started (index ${tc.index})`);
        out.calls[tc.index].function.arguments += tc.function.arguments;
      }
    }
    if (choice.finish_reason) out.finish = choice.finish_reason;
  }
  return out;
}

test('response_format json_schema, json_object and grammar: outputs that parse and validate', async () => {
  const server = await startServer(qwen3Template);
  try {
    const schemas = [
      { type: 'object', properties: { name: { type: 'string', maxLength: 12 }, age: { type: 'integer', minimum: 0, maximum: 150 } },
        required: ['name', 'age'], additionalProperties: false },
      { type: 'object', properties: { tags: { type: 'array', items: { enum: ['red', 'green', 'blue'] }, minItems: 1, maxItems: 3 },
                                      ok: { type: 'boolean' } }, required: ['tags', 'ok'] },
      { type: 'object', properties: { when: { type: 'string', format: 'date' }, id: { type: 'string', pattern: '^[A-Z]{2}-[0-9]{3}$' } },
        required: ['when', 'id'] },
    ];
    for (const [i, schema] of schemas.entries()) {
      const validate = ajv.compile(schema);
      for (const seed of [1, 2, 3]) {
        const r = await server.client.chat.completions.create({
          model: 'tiny', messages, max_tokens: 200, temperature: 1, seed,
          response_format: { type: 'json_schema', json_schema: { name: `s${i}`, strict: true, schema } } });
        const text = r.choices[0].message.content;
        assert.equal(r.choices[0].finish_reason, 'stop', `schema ${i} seed ${seed}: the grammar ended the reply: ${text}`);
        const value = JSON.parse(text);
        assert.ok(validate(value), `schema ${i} seed ${seed}: ${text}: ${ajv.errorsText(validate.errors)}`);
      }
    }
    const obj = await server.client.chat.completions.create({ model: 'tiny', messages, max_tokens: 120, temperature: 1, seed: 5,
                                                              response_format: { type: 'json_object' } });
    const text = obj.choices[0].message.content;
    if (obj.choices[0].finish_reason === 'stop') {
      const v = JSON.parse(text);
      assert.ok(v && typeof v === 'object' && !Array.isArray(v), `json_object gives an object: ${text}`);
    } else {
      assert.match(text, /^\s*\{/, 'a json_object reply cut by max_tokens still starts as an object');
    }
    // kite's (and llama.cpp's) grammar field, on both endpoints, stream and not
    const grammar = 'root ::= ("yes" | "no") " " [0-9]{2,3}';
    const re = /^(yes|no) [0-9]{2,3}$/;
    const c = await server.client.completions.create({ model: 'tiny', prompt: 'Answer:', max_tokens: 20, temperature: 1, seed: 9, grammar });
    assert.match(c.choices[0].text, re);
    const s = await collect(await server.client.chat.completions.create({ model: 'tiny', messages, max_tokens: 20, temperature: 1, seed: 9,
                                                                         grammar, stream: true }));
    assert.match(s.content, re);
    // bad grammars and schemas: a 400 naming the field, and the server goes on
    const bad = async (body, param, re2) => {
      const r = await fetch(`${server.base}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
                                                                    body: JSON.stringify({ model: 'tiny', messages, ...body }) });
      const j = await r.json();
      assert.equal(r.status, 400, JSON.stringify(j));
      assert.equal(j.error.param, param);
      assert.match(j.error.message, re2);
    };
    await bad({ grammar: 'root ::= "a" (' }, 'grammar', /1:\d+/);
    await bad({ grammar: 'root ::= missing' }, 'grammar', /missing/);
    await bad({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'array', minItems: 3, maxItems: 1 } } } },
              'response_format.json_schema.schema', /minItems|maxItems/);
    const after = await server.client.chat.completions.create({ model: 'tiny', messages, max_tokens: 4, temperature: 0 });
    assert.equal(after.choices.length, 1);
  } finally {
    await stopServer(server);
  }
});

// The template families of the chat-template goldens whose templates render tool calls, with the
// markup each one's model writes (as src/chat/tool_calls.h names them).
const FAMILIES = [
  ['qwen3 (tokenizer_config)', qwen3Template],
  ['qwen2_5', path.join(TEMPLATES, 'qwen2_5.jinja')],
  ['cogito', path.join(TEMPLATES, 'cogito.jinja')],
  ['llama3 (3.1)', path.join(TEMPLATES, 'llama3.jinja')],
  ['llama3_2', path.join(TEMPLATES, 'llama3_2.jinja')],
  ['mistral_nemo', path.join(TEMPLATES, 'mistral_nemo.jinja')],
  ['deepseek_v3', path.join(TEMPLATES, 'deepseek_v3.jinja')],
  ['granite3_3', path.join(TEMPLATES, 'granite3_3.jinja')],
  // Command R+'s tool_use template reads Cohere's tool shape and writes calls as "Action: ```json [...]```";
  // GLM-4's reads tools from a message and a call as metadata (name) + content (arguments): the server
  // adapts the OpenAI request for both (src/chat/tool_template.h)
  ['command_r_plus_tool_use', path.join(TEMPLATES, 'command_r_plus_tool_use.jinja')],
  ['glm4', path.join(TEMPLATES, 'glm4.jinja')],
  // Gemma 3's template has no tool markup (the generic JSON call is forced) and refuses tool turns
  ['gemma3 (no markup of its own: generic JSON)', path.join(TEMPLATES, 'gemma3.jinja'), { toolTurns: false }],
];

for (const [family, template, { toolTurns = true } = {}] of FAMILIES) {
  test(`tool calls in ${family}'s markup: tool_choice forces them, stream and non-stream agree`, async () => {
    const server = await startServer(template);
    try {
      const validate = ajv.compile(weather.function.parameters);
      const named = { model: 'tiny', messages, tools: [weather, search], max_tokens: 160, temperature: 0,
                      tool_choice: { type: 'function', function: { name: 'get_weather' } } };
      const whole = await server.client.chat.completions.create(named);
      const m = whole.choices[0].message;
      assert.equal(whole.choices[0].finish_reason, 'tool_calls', JSON.stringify(whole));
      assert.equal(m.tool_calls.length, 1, JSON.stringify(m));
      const call = m.tool_calls[0];
      assert.equal(call.type, 'function');
      assert.match(call.id, /^\S{9,}$/);
      assert.equal(call.function.name, 'get_weather');
      const args = JSON.parse(call.function.arguments);
      assert.ok(validate(args), `${call.function.arguments}: ${ajv.errorsText(validate.errors)}`);
      assert.ok(m.content === null || m.content === '', `no content beside the call: ${JSON.stringify(m.content)}`);

      const streamed = await collect(await server.client.chat.completions.create({ ...named, stream: true }));
      assert.equal(streamed.roles, 1);
      assert.equal(streamed.finish, 'tool_calls');
      assert.equal(streamed.calls.length, 1);
      assert.equal(streamed.calls[0].function.name, 'get_weather');
      assert.equal(streamed.calls[0].function.arguments, call.function.arguments, 'greedy: the same arguments streamed');

      // "required": one of the tools, whichever the model picks, with arguments valid for that tool
      const any = await server.client.chat.completions.create({ ...named, tool_choice: 'required', temperature: 1, seed: 3 });
      const c2 = any.choices[0].message.tool_calls?.[0];
      assert.ok(c2, JSON.stringify(any));
      const tool = [weather, search].find((t) => t.function.name === c2.function.name);
      assert.ok(tool, `a call of one of the tools: ${c2.function.name}`);
      assert.ok(ajv.validate(tool.function.parameters, JSON.parse(c2.function.arguments)), c2.function.arguments);

      // the call goes back through the template with the tool's answer, and the conversation goes on
      const followUp = { model: 'tiny', tools: [weather, search], max_tokens: 8, temperature: 0, tool_choice: 'none',
                         messages: [...messages, m, { role: 'tool', tool_call_id: call.id, content: '{"temperature": 21}' }] };
      if (toolTurns) {
        const next = await server.client.chat.completions.create(followUp);
        assert.equal(next.choices.length, 1);
        assert.equal(next.choices[0].message.tool_calls, undefined, 'tool_choice none: no calls');
      } else {
        await assert.rejects(server.client.chat.completions.create(followUp),
                             (err) => err.status === 400 && /could not render these messages/.test(err.message));
      }
    } finally {
      await stopServer(server);
    }
  });
}

test('gpt-oss harmony markup: tool_choice required forces a call (markers as text in a vocabulary without them)', async () => {
  // the shape of gpt-oss's template: harmony messages; Qwen3's vocabulary has no <|channel|> token, so the
  // grammar writes the markers as text (with gpt-oss's vocabulary they are token references)
  const harmony = path.join(work, 'harmony.jinja');
  fs.writeFileSync(harmony, '{% for m in messages %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>{% endfor %}' +
                            '{% if add_generation_prompt %}<|start|>assistant<|channel|>{% endif %}');
  const server = await startServer(harmony);
  try {
    const forced = await server.client.chat.completions.create({ model: 'tiny', messages, tools: [weather], tool_choice: 'required',
                                                                 max_tokens: 160, temperature: 0 });
    const call = forced.choices[0].message.tool_calls?.[0];
    assert.ok(call, JSON.stringify(forced));
    assert.equal(call.function.name, 'get_weather');
    assert.ok(ajv.validate(weather.function.parameters, JSON.parse(call.function.arguments)), call.function.arguments);
    // tool_choice auto still works: the tools reach the template and the reply is parsed
    const ok = await server.client.chat.completions.create({ model: 'tiny', messages, tools: [weather], max_tokens: 4, temperature: 0 });
    assert.equal(ok.choices.length, 1);
  } finally {
    await stopServer(server);
  }
});

// tool_choice auto holds a call to the tools' schemas from its trigger on (a lazy grammar) and leaves the
// text before it free. Free: greedy replies under auto are the replies under tool_choice none (no
// grammar) as long as the model starts no call, which the random model does not do unbiased. Fired: a
// logit bias on the trigger's token makes the model start calls at T=1, after some free text for
// Hermes/Qwen's <tool_call> (anywhere) and at once for Llama-3.1's '{' (a reply is a call when it is a
// JSON object); every call then validates (ajv) and the text before it holds no trigger.
const AUTO_FAMILIES = [
  // [family, template, the trigger's token, the trigger, a bias that starts calls soon but not always at once]
  ['qwen3 (tokenizer_config)', qwen3Template, '151657', '<tool_call>', 3.5], // <tool_call> is one token
  ['llama3 (3.1)', path.join(TEMPLATES, 'llama3.jinja'), '90', '{', 9],      // '{'
];
for (const [family, template, triggerToken, trigger, bias] of AUTO_FAMILIES) {
  test(`tool_choice auto in ${family}'s markup: free text, then calls held to the schemas from the trigger on`, async () => {
    const server = await startServer(template);
    try {
      const tools = [weather, search];
      for (const question of ['What is the weather in Paris?', 'Tell me a story.', 'Search for cheap flights to Oslo.']) {
        const base = { model: 'tiny', messages: [messages[0], { role: 'user', content: question }], tools, max_tokens: 24, temperature: 0 };
        const auto = (await server.client.chat.completions.create({ ...base, tool_choice: 'auto' })).choices[0];
        const none = (await server.client.chat.completions.create({ ...base, tool_choice: 'none' })).choices[0];
        assert.equal(auto.message.tool_calls, undefined, JSON.stringify(auto));
        assert.equal(auto.message.content, none.message.content, `${question}: free text under auto is the unconstrained text`);
        assert.equal(auto.message.reasoning_content, none.message.reasoning_content);
        assert.equal(auto.finish_reason, none.finish_reason);
      }
      let fired = 0, afterText = 0;
      for (let seed = 1; seed <= 8; seed++) {
        const req = { model: 'tiny', messages, tools, max_tokens: 200, temperature: 1, seed, logit_bias: { [triggerToken]: bias },
                      parallel_tool_calls: seed % 2 === 0 };
        const r = (await server.client.chat.completions.create(req)).choices[0];
        const m = r.message;
        assert.ok(!(m.content ?? '').includes(trigger) || trigger === '{', `no trigger in the free text: ${JSON.stringify(m)}`);
        if (!m.tool_calls) continue;
        if (r.finish_reason === 'length') { // parallel calls may go on to max_tokens: all but the cut last one validate
          for (const call of m.tool_calls.slice(0, -1))
            assert.ok(ajv.validate(tools.find((t) => t.function.name === call.function.name).function.parameters,
                                   JSON.parse(call.function.arguments)), call.function.arguments);
          continue;
        }
        fired++;
        if ((m.content ?? '').length > 0 || (m.reasoning_content ?? '').length > 0) afterText++;
        assert.equal(r.finish_reason, 'tool_calls', JSON.stringify(r));
        if (!req.parallel_tool_calls) assert.equal(m.tool_calls.length, 1, 'parallel_tool_calls false: one call');
        for (const call of m.tool_calls) {
          const tool = tools.find((t) => t.function.name === call.function.name);
          assert.ok(tool, `a call of one of the tools: ${JSON.stringify(call)}`);
          assert.ok(ajv.validate(tool.function.parameters, JSON.parse(call.function.arguments)), call.function.arguments);
        }
        // streamed: the same reply, from argument deltas
        const streamed = await collect(await server.client.chat.completions.create({ ...req, stream: true }));
        assert.equal(streamed.finish, 'tool_calls');
        assert.deepEqual(streamed.calls.map((c) => [c.function.name, c.function.arguments]),
                         m.tool_calls.map((c) => [c.function.name, c.function.arguments]));
        assert.equal(streamed.content, m.content ?? '');
      }
      console.log(`# ${family}: ${fired} of 8 replies called, ${afterText} after free text`);
      assert.ok(fired >= 4, `the bias starts calls: ${fired} of 8`);
      if (trigger !== '{') assert.ok(afterText >= 1, `some calls come after free text: ${afterText}`);
    } finally {
      await stopServer(server);
    }
  });
}
