// Copies the migration SQL files next to the compiled code, for teams that
// apply them with their own migration tool (see docs/schema.md).
import { copyFileSync, mkdirSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const from = join(root, 'src', 'schema');
const to = join(root, 'dist', 'schema');
mkdirSync(to, { recursive: true });
for (const f of readdirSync(from)) if (f.endsWith('.sql')) copyFileSync(join(from, f), join(to, f));
