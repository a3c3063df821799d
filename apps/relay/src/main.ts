#!/usr/bin/env node
import { runServiceMain } from '@tether/telemetry/cli';
import { buildCli } from './cli.js';

await runServiceMain('relay', buildCli);
