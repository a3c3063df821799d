#!/usr/bin/env node
// Thin launcher so the bin exists before the first build; the program itself is dist/main.js, run once
// @tether/telemetry's launch has checked the Node version.
import { launch } from '@tether/telemetry/launch';

await launch('registry', new URL('../dist/main.js', import.meta.url));
