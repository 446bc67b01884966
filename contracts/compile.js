#!/usr/bin/env node
// Compiles contracts/*.sol with solc-js (node_modules/solc) and writes
// contracts/build/<ContractName>.json for the three top-level contracts.
//
//   node contracts/compile.js          compile and write the artifacts
//   node contracts/compile.js --check  compile in memory; exit 1 if an artifact in
//                                      contracts/build/ is missing or differs (abi, bytecode)
//
// The settings are fixed (optimizer on, 200 runs, evmVersion cancun, no metadata hash in the
// bytecode), so the same sources and the same compiler always give the same bytecode.
'use strict';

const crypto = require('crypto');
const fs = require('fs');
const path = require('path');

const CONTRACTS_DIR = __dirname;
const ROOT = path.resolve(CONTRACTS_DIR, '..');
const BUILD_DIR = path.join(CONTRACTS_DIR, 'build');
const NODE_MODULES = path.join(ROOT, 'node_modules');
const TOP_LEVEL = ['LLMChainAccess', 'Identity', 'Reputation', 'Forwarder'];

const SETTINGS = {
  optimizer: { enabled: true, runs: 200 },
  viaIR: true,
  evmVersion: 'cancun',
  metadata: { bytecodeHash: 'none', appendCBOR: true },
  outputSelection: {
    '*': { '*': ['abi', 'evm.bytecode.object', 'evm.deployedBytecode.object'] },
  },
};

function fail(message) {
  process.stderr.write(`compile.js: ${message}\n`);
  process.exit(1);
}

let solc;
try {
  solc = require(path.join(NODE_MODULES, 'solc'));
} catch (err) {
  fail(`cannot load solc from ${NODE_MODULES} (run npm install): ${err.message}`);
}

// Source unit names are repository-relative ("contracts/X.sol"), so the build does not depend
// on where the repository is checked out.
function readSources() {
  const sources = {};
  const files = fs.readdirSync(CONTRACTS_DIR).filter((f) => f.endsWith('.sol')).sort();
  if (files.length === 0) fail(`no .sol files in ${CONTRACTS_DIR}`);
  for (const f of files) {
    sources[`contracts/${f}`] = { content: fs.readFileSync(path.join(CONTRACTS_DIR, f), 'utf8') };
  }
  return sources;
}

// Every source solc asked for through the import callback, so that sourceHash covers them.
const imported = {};

function findImports(unitName) {
  let file;
  if (unitName.startsWith('@openzeppelin/')) {
    file = path.join(NODE_MODULES, unitName);
    if (!file.startsWith(path.join(NODE_MODULES, '@openzeppelin') + path.sep)) {
      return { error: `refusing import outside node_modules/@openzeppelin: ${unitName}` };
    }
  } else if (unitName.startsWith('contracts/')) {
    file = path.join(ROOT, unitName);
    if (!file.startsWith(CONTRACTS_DIR + path.sep)) {
      return { error: `refusing import outside contracts/: ${unitName}` };
    }
  } else {
    return { error: `unresolvable import ${unitName} (only @openzeppelin/... and contracts/...)` };
  }
  try {
    const content = fs.readFileSync(file, 'utf8');
    imported[unitName] = content;
    return { contents: content };
  } catch (err) {
    return { error: `cannot read ${file}: ${err.message}` };
  }
}

function sha256Of(allSources) {
  const hash = crypto.createHash('sha256');
  for (const name of Object.keys(allSources).sort()) {
    hash.update(name);
    hash.update('\0');
    hash.update(allSources[name]);
    hash.update('\0');
  }
  return hash.digest('hex');
}

function compile() {
  const sources = readSources();
  const input = { language: 'Solidity', sources, settings: SETTINGS };
  const output = JSON.parse(solc.compile(JSON.stringify(input), { import: findImports }));

  const diagnostics = output.errors || [];
  const errors = diagnostics.filter((d) => d.severity === 'error');
  for (const d of diagnostics) {
    const text = d.formattedMessage || `${d.type}: ${d.message}`;
    if (d.severity === 'error') process.stderr.write(`${text}\n`);
    else process.stderr.write(`[${d.severity}] ${text}\n`);
  }
  if (errors.length) fail(`${errors.length} compiler error(s); nothing written`);

  const allSources = {};
  for (const [name, { content }] of Object.entries(sources)) allSources[name] = content;
  Object.assign(allSources, imported);
  const sourceHash = sha256Of(allSources);

  const artifacts = {};
  for (const name of TOP_LEVEL) {
    const sourceName = `contracts/${name}.sol`;
    const contract = output.contracts && output.contracts[sourceName] && output.contracts[sourceName][name];
    if (!contract) fail(`contract ${name} not found in ${sourceName}`);
    const bytecode = contract.evm.bytecode.object;
    const deployed = contract.evm.deployedBytecode.object;
    if (!bytecode) fail(`${name} has no bytecode (abstract contract?)`);
    artifacts[name] = {
      contractName: name,
      sourceName,
      abi: contract.abi,
      bytecode: `0x${bytecode}`,
      deployedBytecode: `0x${deployed}`,
      compiler: solc.version(),
      settings: {
        optimizer: SETTINGS.optimizer,
        viaIR: SETTINGS.viaIR,
        evmVersion: SETTINGS.evmVersion,
        metadata: SETTINGS.metadata,
      },
      sourceHash,
    };
  }
  return artifacts;
}

function serialize(artifact) {
  return `${JSON.stringify(artifact, null, 2)}\n`;
}

function check(artifacts) {
  let bad = 0;
  for (const name of TOP_LEVEL) {
    const file = path.join(BUILD_DIR, `${name}.json`);
    const rel = path.relative(ROOT, file);
    let stored;
    try {
      stored = JSON.parse(fs.readFileSync(file, 'utf8'));
    } catch (err) {
      process.stderr.write(`MISSING/UNREADABLE ${rel}: ${err.message}\n`);
      bad += 1;
      continue;
    }
    const fresh = artifacts[name];
    const diffs = [];
    for (const key of ['bytecode', 'deployedBytecode']) {
      if (stored[key] !== fresh[key]) diffs.push(key);
    }
    if (JSON.stringify(stored.abi) !== JSON.stringify(fresh.abi)) diffs.push('abi');
    if (stored.sourceHash !== fresh.sourceHash) diffs.push('sourceHash');
    if (diffs.length) {
      process.stderr.write(`DIFFERS ${rel}: ${diffs.join(', ')} (run: npm run compile)\n`);
      bad += 1;
    } else {
      process.stdout.write(`ok ${rel}\n`);
    }
  }
  if (bad) fail(`${bad} artifact(s) out of date`);
  process.stdout.write(`all ${TOP_LEVEL.length} artifacts match a fresh build (${solc.version()})\n`);
}

function write(artifacts) {
  fs.mkdirSync(BUILD_DIR, { recursive: true });
  for (const name of TOP_LEVEL) {
    const file = path.join(BUILD_DIR, `${name}.json`);
    fs.writeFileSync(file, serialize(artifacts[name]));
    const a = artifacts[name];
    process.stdout.write(
      `wrote ${path.relative(ROOT, file)} (runtime ${(a.deployedBytecode.length - 2) / 2} bytes)\n`,
    );
  }
}

function main() {
  const args = process.argv.slice(2);
  const unknown = args.filter((a) => a !== '--check');
  if (unknown.length) fail(`unknown argument(s): ${unknown.join(' ')} (usage: compile.js [--check])`);
  const artifacts = compile();
  if (args.includes('--check')) check(artifacts);
  else write(artifacts);
}

main();
