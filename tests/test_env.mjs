// What every node test of kite reads from ctest: the source tree, the kite binary, the test data, the
// real `openai` client from the npm oracle, and the small model the server tests run.
import path from 'node:path';

export const SRC = process.env.KITE_SOURCE_DIR;
export const BIN = process.env.KITE_BIN;
export const DATA = process.env.KITE_TEST_DATA;
for (const [name, value] of Object.entries({ KITE_SOURCE_DIR: SRC, KITE_BIN: BIN, KITE_TEST_DATA: DATA }))
  if (!value) throw new Error(`${name} is not set (ctest sets it)`);
export const { default: OpenAI } = await import(path.join(SRC, 'tests/oracle/node_modules/openai/index.mjs'));

export const MODEL = path.join(DATA, 'models/tinystories-656k/tinystories-656k-q8_0.gguf');
export const TEMPLATE = path.join(SRC, 'tests/serve/chatml.jinja');
