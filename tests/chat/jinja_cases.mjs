// Renders every Jinja snippet below with @huggingface/jinja (the reference kite's interpreter follows)
// and writes tests/chat/jinja_cases.json: {name, template, context, output} or {..., error}.
// test_jinja.c renders the same snippets with kite and compares byte for byte.
// Usage: node jinja_cases.mjs [--check]   (--check: fail if the committed file differs)
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const { Template } = await import(join(here, "../oracle/node_modules/@huggingface/jinja/dist/index.js"));

// strftime_now reads `new Date()`: pin it (2026-12-01 09:05:07 UTC; run with TZ=UTC).
const FIXED = Date.UTC(2026, 11, 1, 9, 5, 7);
const RealDate = Date;
globalThis.Date = class extends RealDate {
  constructor(...a) {
    if (a.length === 0) super(FIXED);
    else super(...a);
  }
};

const msgs = [
  { role: "system", content: "You are helpful." },
  { role: "user", content: "Hi <there> & \"you\"" },
  { role: "assistant", content: "Hello!", tool_calls: [{ type: "function", function: { name: "f", arguments: { a: 1, b: "x" } } }] },
  { role: "user", content: [{ type: "text", text: "part one" }, { type: "image" }] },
];

const cases = [
  // text and whitespace control
  ["text", "hello world", {}],
  ["trailing_newline_dropped", "a\n", {}],
  ["two_trailing_newlines", "a\n\n", {}],
  ["expr_ws", "a {{- ' b ' -}} c", {}],
  ["stmt_ws", "x  \n  {%- if true -%}  \n y \n  {%- endif -%}  \n z", {}],
  ["trim_blocks", "{% if true %}\nyes\n{% endif %}\nafter", {}],
  ["lstrip_blocks", "  {% if true %}\n    yes\n  {% endif %}\n", {}],
  ["lstrip_expr_not", "  {{ 'x' }}\n  {# c #}\nz", {}],
  ["comment", "a{# note #}b{#- strip -#}  c  {#- x #}d", {}],
  ["generation_tag", "A {% generation %}B{% endgeneration %} C", {}],
  ["generation_strip", "A \n {%- generation -%}\n B \n{%- endgeneration %}\n C", {}],
  ["crlf", "{% if true %}\r\nx\r\n{% endif %}\r\n", {}],
  // literals and printing
  ["print_values", "{{ 1 }}|{{ 1.0 }}|{{ 1.5 }}|{{ -0.0 }}|{{ true }}|{{ True }}|{{ none }}|{{ None }}|{{ undefined_var }}|{{ 'a' }}", {}],
  ["print_list", "{{ [1, 'a', true, none, 2.5, [3]] }}", {}],
  ["print_dict", "{{ {'a': 1, 'b': [1, 2], 'c': {'d': none}} }}", {}],
  ["print_tuple_errors", "{{ (1, 2) }}", {}],
  ["tuple_tests", "{{ (1, 2) is iterable }} {{ (1, 2) is sequence }} {{ (1, 2)|length }} {{ (1, 2)[1] }}", {}],
  ["big_numbers", "{{ 12345678901234567890 }}|{{ 0.000001 }}|{{ 1 / 3 }}|{{ 10 ** 21 }}|{{ 2 ** 0.5 }}", {}],
  ["string_escapes", "{{ 'a\\nb\\tc\\\\d\\'e\\\"f' }}|{{ \"\\x41\\u00e9\" }}|{{ 'x' 'y' \"z\" }}", {}],
  ["unicode_text", "héllo {{ 'wörld' }} 😀 {{ s }}", { s: "日本語" }],
  // operators
  ["arith", "{{ 7 + 2 }} {{ 7 - 2 }} {{ 7 * 2 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ 7 % 2 }} {{ 2 ** 10 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7.5 // 2 }} {{ 1 + 1.0 }}", {}],
  ["precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ not true or true }} {{ not (true or true) }}", {}],
  ["compare", "{{ 1 < 2 }} {{ 2 <= 2 }} {{ 3 > 4 }} {{ 1 == 1.0 }} {{ 'a' == 'a' }} {{ 'a' != 'b' }} {{ 1 == '1' }} {{ none == undefined_x }} {{ true == 1 }}", {}],
  ["logic_values", "{{ 0 or 'x' }} {{ '' and 'y' }} {{ [] or 'e' }} {{ 'a' and 'b' }} {{ none or none }}|", {}],
  ["concat", "{{ 'a' ~ 1 ~ 1.0 ~ true ~ [1, 'b'] }} {{ 'n' + 2 }} {{ [1] + [2, 3] }}", {}],
  ["in_ops", "{{ 'a' in 'cat' }} {{ 'z' not in 'cat' }} {{ 2 in [1, 2] }} {{ '2' in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'x' in undefined_y }} {{ 'x' not in undefined_y }}", {}],
  ["ternary", "{{ 'y' if 1 else 'n' }} {{ 'y' if 0 else 'n' }} {{ 'y' if false }}|{{ 'a' if false else 'b' if true else 'c' }}", {}],
  ["unary", "{{ -x }} {{ +x }} {{ - - 3 }} {{ -true }} {{ -1.5 }}", { x: 4 }],
  // variables, members and slicing
  ["member_access", "{{ m.role }} {{ m['content'] }} {{ l[0] }} {{ l[-1] }} {{ l.1 }} {{ m.missing }}|{{ m.missing.deeper }}|", { m: { role: "user", content: "hi" }, l: [10, 20, 30] }],
  ["slicing", "{{ l[1:] }} {{ l[:2] }} {{ l[::-1] }} {{ l[-2:] }} {{ l[::2] }} {{ l[5:] }} {{ s[1:3] }} {{ s[::-1] }} {{ s[-3:] }}", { l: [1, 2, 3, 4], s: "héllo" }],
  ["string_index", "{{ s[0] }}{{ s[-1] }}{{ s.length }}{{ s|length }}", { s: "abcé" }],
  ["json_key_order", "{{ d }} {% for k in d %}{{ k }},{% endfor %}", { d: { b: 1, "2": 2, a: 3, "1": 4 } }],
  // if / for
  ["if_elif_else", "{% for x in [1, 2, 3, 4] %}{% if x == 1 %}one{% elif x == 2 %}two{% elif x == 3 %}three{% else %}many{% endif %} {% endfor %}", {}],
  ["for_loop_vars", "{% for x in ['a', 'b', 'c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }};{% endfor %}", {}],
  ["for_else", "{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in [1] %}{{ x }}{% else %}e{% endfor %}", {}],
  ["for_filter", "{% for x in [1, 2, 3, 4, 5] if x is odd %}{{ x }}{{ loop.index }}{{ loop.last }} {% endfor %}", {}],
  ["for_unpack", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}", { d: { x: 1, y: "z" } }],
  ["for_dict", "{% for k in {'a': 1, 'b': 2} %}{{ k }}{% endfor %}", {}],
  ["for_break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}],
  ["break_drops_partial", "{% for x in [1, 2, 3] %}a{{ x }}{% if x == 2 %}{% break %}{% endif %}b{% endfor %}", {}],
  ["for_else_after_break", "{% for x in [1] %}{% break %}{% else %}else-ran{% endfor %}", {}],
  ["nested_loops", "{% for i in range(3) %}{% for j in range(i) %}{{ i }}{{ j }}{{ loop.index }} {% endfor %}{{ loop.index }}|{% endfor %}", {}],
  ["loop_scope", "{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}", {}],
  ["range_forms", "{{ range(3) }} {{ range(1, 4) }} {{ range(10, 0, -3) }} {{ range(0) }}", {}],
  // set, namespace
  ["set_forms", "{% set a = 1 %}{% set b, c = [2, 3] %}{% set d = 'x', 'y' %}{{ a }}{{ b }}{{ c }}{{ d|length }}{{ d[0] }}", {}],
  ["set_block", "{% set blk %}hello {{ 'w' }}{% endset %}[{{ blk }}]{{ blk|length }}", {}],
  ["namespace", "{% set ns = namespace(count=0, found=false) %}{% for m in messages %}{% if m.role == 'user' %}{% set ns.count = ns.count + 1 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.count }} {{ ns.found }} {{ ns }}", { messages: msgs }],
  ["namespace_from_dict", "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}", {}],
  // macros and call
  ["macro_basic", "{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', 'Hi') }} {{ greet(name='Cy', greeting='Yo') }}", {}],
  ["macro_defaults_ref", "{% macro f(a, b=a ~ '!') %}{{ a }}{{ b }}{% endmacro %}{{ f('x') }}", {}],
  ["macro_kwargs_varargs", "{% macro f(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ f(1, 2, 3, k='v') }}", {}],
  ["macro_recursion", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }}", {}],
  ["macro_dynamic_scope", "{% macro show() %}{{ outer }}{% endmacro %}{% set outer = 'o1' %}{{ show() }}{% for outer in ['o2'] %}{{ show() }}{% endfor %}", {}],
  ["call_block", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ 1 + 1 }}{% endcall %}", {}],
  ["call_block_args", "{% macro each(items) %}{% for i in items %}{{ caller(i, loop.index) }}{% endfor %}{% endmacro %}{% call(item, n) each(['a', 'b']) %}{{ n }}:{{ item }};{% endcall %}", {}],
  ["filter_block", "{% filter upper %}hello {{ 'x' }}{% endfilter %}|{% filter replace('a', 'o') %}banana{% endfilter %}", {}],
  // filters
  ["filter_strings", "{{ '  a b  '|trim }}|{{ 'ab'|upper }}|{{ 'AB'|lower }}|{{ 'hello world-foo o\\'neil'|title }}|{{ 'hELLO'|capitalize }}|{{ 'abc'|length }}|{{ 'x'|string }}|{{ 'ab'|join }}|{{ 'ab'|join('-') }}", {}],
  ["filter_numbers", "{{ -3|abs }} {{ (-3.5)|abs }} {{ 3.7|int }} {{ (-3.7)|int }} {{ 3|float }} {{ '42'|int }} {{ ' 42abc'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ '3.5e1x'|float }} {{ 'x'|float }} {{ 2|string }} {{ 2.0|string }} {{ true|int }} {{ true|string }}", {}],
  ["filter_lists", "{{ l|length }} {{ l|first }} {{ l|last }} {{ l|reverse }} {{ l|sort }} {{ l|join }} {{ l|join(', ') }} {{ l|unique }} {{ l|list }} {{ l|string }}", { l: [3, 1, 2, 3] }],
  ["filter_sort_attr", "{{ users|sort(attribute='age')|map(attribute='name')|join(',') }} {{ users|sort(attribute='name', reverse=true)|map(attribute='name')|join(',') }} {{ ['b', 'A', 'c']|sort }} {{ ['b', 'A', 'c']|sort(case_sensitive=true) }}", { users: [{ name: "bo", age: 30 }, { name: "al", age: 25 }, { name: "cy", age: 35 }] }],
  ["filter_select", "{{ tools|selectattr('type', 'equalto', 'function')|map(attribute='name')|join(',') }} {{ tools|rejectattr('type', 'equalto', 'function')|length }} {{ tools|selectattr('enabled')|length }}", { tools: [{ type: "function", name: "a", enabled: true }, { type: "code", name: "b" }, { type: "function", name: "c", enabled: false }] }],
  ["filter_map_default", "{{ l|map(attribute='x', default='d')|join(',') }} {{ l|map(attribute='y.z')|list }}", { l: [{ x: 1, y: { z: 2 } }, { y: {} }] }],
  ["filter_default", "{{ undefined_a|default('d') }} {{ none|default('d') }} {{ ''|default('d') }} {{ ''|default('d', true) }} {{ 0|default('z', boolean=true) }} {{ x|default('no') }}", { x: "yes" }],
  ["filter_dict", "{{ d|items }} {{ d|length }} {{ d|keys }} {{ d|values }} {{ d|dictsort }} {{ d.get('a') }} {{ d.get('zz', 'dflt') }} {{ d.get('zz') }}", { d: { b: 2, a: 1 } }],
  ["filter_indent", "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, first=true, blank=true) }}", {}],
  ["filter_replace", "{{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 'abc'|replace('', '-') }} {{ 'aaa'.replace('a', 'c', count=1) }}", {}],
  ["tojson_forms", "{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ d|tojson(sort_keys=true) }}|{{ d|tojson(separators=(',', ':')) }}|{{ 'é😀\\u0001'|tojson }}|{{ 'é😀'|tojson(ensure_ascii=true) }}|{{ undefined_z|tojson }}|{{ [1.0, 2.5, none, true]|tojson }}", { d: { b: [1, { c: "x\"y" }], a: null, "Z": {}, "_u": [] } }],
  ["tojson_indent_nested", "{{ tools|tojson(indent=4) }}", { tools: [{ type: "function", function: { name: "get_weather", description: "Get the weather", parameters: { type: "object", properties: { location: { type: "string" } }, required: ["location"] } } }] }],
  ["tojson_sort_case", "{{ d|tojson(sort_keys=true) }}", { d: { b: 1, B: 2, a: 3, A: 4, _x: 5, "1": 6, "a_b": 7, "ab": 8 } }],
  ["safe", "{{ '<b>'|safe }}", {}],
  // tests
  ["tests", "{{ x is defined }} {{ y is undefined }} {{ none is none }} {{ 's' is string }} {{ 1 is number }} {{ 1.5 is number }} {{ 1 is integer }} {{ 1.5 is integer }} {{ true is boolean }} {{ {} is mapping }} {{ [] is iterable }} {{ 's' is iterable }} {{ {} is iterable }} {{ [] is sequence }} {{ 3 is odd }} {{ 4 is even }} {{ true is true }} {{ 0 is false }} {{ 'ab' is lower }} {{ 'AB' is upper }} {{ range is callable }} {{ x is not none }}", { x: 1 }],
  ["is_defined_idioms", "{% if tools is defined and tools %}T{% endif %}{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}{{ add_generation_prompt }}", {}],
  // string methods
  ["str_methods", "{{ s.upper() }}|{{ s.lower() }}|{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ s.title() }}|{{ s.capitalize() }}|{{ s.startswith('  He') }}|{{ s.endswith(('x', 'd  ')) }}", { s: "  Hello world  " }],
  ["str_split", "{{ 'a,b,,c'.split(',') }} {{ 'a b  c '.split() }} {{ 'a,b,c'.split(',', 1) }} {{ ' a b c '.split(none, 1) }} {{ 'abc'.split('x') }}", {}],
  ["str_strip_chars", "{{ 'xxhixx'.strip('x') }}", {}],
  ["think_split", "{{ c.split('</think>')[-1].lstrip('\\n') }}|{{ c.split('<think>')[-1].split('</think>')[0].rstrip('\\n') }}", { c: "<think>\nreason\n</think>\n\nanswer" }],
  // functions
  ["raise_exception", "{% if true %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}", {}],
  ["strftime_now", "{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%Y-%m-%d %H:%M %B %%') }}|{{ strftime_now('%A %e') }}", {}],
  // realistic template fragments
  ["chatml", "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + (message['content'] if message['content'] is string else message['content'][0]['text']) + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}", { messages: msgs, add_generation_prompt: true }],
  ["tool_calls_json", "{% for m in messages %}{% if m.tool_calls %}{% for tc in m.tool_calls %}{{ tc.function.name }}:{{ tc.function.arguments|tojson }}{% endfor %}{% endif %}{% endfor %}", { messages: msgs }],
  ["llama_style_system", "{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = messages[0]['content']|trim %}\n    {%- set messages = messages[1:] %}\n{%- else %}\n    {%- set system_message = \"\" %}\n{%- endif %}\n{{- bos_token }}\n{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n{{- system_message }}\n{%- for message in messages %}\n{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}\n{%- endfor %}", { messages: msgs.slice(0, 3), bos_token: "<|begin_of_text|>" }],
  // more semantics
  ["numbers_more", "{{ 0.1 + 0.2 }} {{ 5 % -3 }} {{ -5 // 2 }} {{ 2 ** -1 }} {{ 2 ** 53 + 1 }} {{ 1 / 0 }} {{ 10 / 4 }} {{ 3 * 1.5 }} {{ 100000000000000000000 * 10 }}", {}],
  ["unicode_case", "{{ 'straße ÉCOLE ǅ'|upper }} {{ 'ÉCOLE İ'|lower }} {{ 'élan vital'|title }} {{ 'éa'|capitalize }}", {}],
  ["loop_filtered_previtem", "{% for x in [1, 2, 3, 4] if x != 2 %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}", {}],
  ["dictsort_args", "{{ d|dictsort(by='value') }} {{ d|dictsort(reverse=true) }} {{ d.dictsort(true) }}", { d: { b: "B", a: "c", C: "a" } }],
  ["set_block_in_loop", "{% for i in [1, 2] %}{% set s %}<{{ i }}>{% endset %}{{ s }}{% endfor %}{{ s is defined }}", {}],
  ["caller_kwargs", "{% macro m() %}{{ caller(x=1) }}{% endmacro %}{% call(x=0) m() %}[{{ x }}]{% endcall %}", {}],
  ["dict_literal_vars", "{% set k = 'key' %}{{ {k: 1, 'b' ~ 'c': [k]} }}", {}],
  ["chained_defaults", "{{ x|default(none)|tojson }} {{ y|default([])|length }} {{ (z or {})|tojson }}", {}],
  ["not_in_chain", "{{ not 'a' in 'abc' }} {{ 'a' not in 'abc' }} {{ not not 1 }}", {}],
  ["content_types", "{% for m in messages %}{{ m.content is string }}{{ m.content is none }}{{ m.content is iterable }}{% endfor %}", { messages: [{ role: "user", content: "x" }, { role: "assistant", content: null }, { role: "user", content: [{ type: "text", text: "y" }] }] }],
  ["tabs_lstrip", "\t  {% if true %}\n\tx\n\t{% endif %}\n", {}],
  ["nbsp_strip", "a\u00a0 {{- 'b' -}} \u3000c", {}],
  ["whitespace_expr_edges", "{{'a'}}{{ 'b'-}}  {{-'c'}}", {}],
  ["string_plus_number", "{{ 'v' + 1.5 }} {{ 'v' + 2.0 }} {{ 1 ~ 2 }}", {}],
  ["list_equality", "{% set a = [1] %}{{ a == a }} {{ [1] == [1] }} {{ a is sequence }}", {}],
  ["ns_print_list", "{% set ns = namespace(items=[]) %}{% set ns.items = ns.items + ['x'] %}{% set ns.items = ns.items + ['y'] %}{{ ns.items|join(',') }} {{ ns.items|tojson }}", {}],
  ["items_unpack_nested", "{% for k, v in {'a': {'b': 1}}|items %}{{ k }}{{ v.b }}{{ v|items }}{% endfor %}", {}],
  ["err_raw_block", "{% raw %}{{ x }}{% endraw %}", {}],
  ["err_tojson_macro", "{% macro m() %}{% endmacro %}{{ [m]|tojson }}", {}],
  ["err_sort_mixed", "{{ [1, 'a']|sort }}", {}],
  ["err_string_filter_dict", "{{ {'a': 1}|string }}", {}],
  ["err_in_number", "{{ 1 in 'abc' }}", {}],
  ["err_set_non_namespace", "{% set d = {} %}{% set d.x = 1 %}", {}],
  ["err_break_outside", "{% break %}", {}],
  ["err_bad_escape", "{{ '\\q' }}", {}],
  ["err_dup_param", "{% macro m(a, a) %}{% endmacro %}", {}],
  ["slice_step_zero", "{{ [1, 2][::0] }}|{{ 'ab'[::0] }}|", {}],
  ["range_odd_args", "{{ range() }} {{ range(undefined_r) }} {{ range(none) }} {{ range(2.5) }} {{ range(0, -5, -2) }} {{ range(true) }}", {}],
  ["explicit_undefined_args", "{{ 'a b'|indent(2, undefined_f) }}|{{ [2, 1]|sort(undefined_r is defined) }}|{{ d.get('x', undefined_d) is none }}|{{ d.get('x') is none }}", { d: {} }],
  ["err_undefined_kwarg", "{{ {'a': 1}|tojson(sort_keys=undefined_s) }}", {}],
  ["err_split_undefined_sep", "{{ 'a b'.split(undefined_s) }}", {}],
  ["big_indent", "{{ {'a': [1]}|tojson(indent=12) }}", {}],
  // errors
  ["err_unknown_filter", "line1\n{{ 'x'|nosuchfilter }}", {}],
  ["err_syntax_unclosed", "a\nb\n{% if x %}\nc", {}],
  ["err_syntax_bad_char", "{{ 1 }}\n{{ 1 ? 2 }}", {}],
  ["err_unknown_statement", "\n\n{% frobnicate %}", {}],
  ["err_unterminated_string", "{{ 'abc }}", {}],
  ["err_undefined_op", "{{ undefined_q + 1 }}", {}],
  ["err_null_concat", "{{ 'a' ~ none }}", {}],
  ["err_call_non_function", "{{ 'x'() }}", {}],
  ["err_missing_endfor", "{% for x in y %}", {}],
  ["err_bad_unpack", "{% for a, b in [(1, 2)] %}{{ a }}{% endfor %}", {}],
  ["err_string_iter", "{% for c in 'abc' %}{{ c }}{% endfor %}", {}],
  ["err_map_without_attr", "{{ [1]|map('string')|list }}", {}],
  ["err_default_no_args", "{{ x|default }}", {}],
  ["err_compare_strings", "{{ 'a' < 'b' }}", {}],
  ["err_macro_extra_arg", "{% macro f(a) %}{{ a }}{% endmacro %}{{ f(1, 2) }}", {}],
  ["err_comment_unclosed", "{# never closed", {}],
];

const out = cases.map(([name, template, context]) => {
  const entry = { name, template, context };
  try {
    entry.output = new Template(template).render(context);
  } catch (e) {
    entry.error = String(e && e.message !== undefined ? e.message : e);
  }
  return entry;
});
const text = JSON.stringify(out, null, 1) + "\n";
const file = join(here, "jinja_cases.json");
if (process.argv.includes("--check")) {
  const old = readFileSync(file, "utf8");
  if (old !== text) {
    console.error("tests/chat/jinja_cases.json is stale: run node tests/chat/jinja_cases.mjs");
    process.exit(1);
  }
  console.log(`jinja_cases.json is current (${out.length} cases)`);
} else {
  writeFileSync(file, text);
  console.log(`wrote ${file}: ${out.length} cases`);
}
