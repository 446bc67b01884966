// Run an offline js-ipfs daemon (npm `ipfs`, js-ipfs 0.66.1) for the tests and `make run`.
// Started by apps/chain/ipfs_node.py:  node ipfs_daemon.mjs <repo path> '<config JSON>'
//
// The config is merged into the repo's config on every start (js-ipfs does that for `config`), so a
// restart on another port works; a missing repo is created (empty: no help files). Prints one line
// `ready {"api": ..., "gateway": ...}` when the HTTP API listens; SIGTERM/SIGINT stop the node
// cleanly (that releases <repo>/repo.lock). Exits 1 when the node cannot start (the `jsipfs daemon`
// CLI exits 0 then, and also starts update-notifier, which dials the npm registry).
import { Daemon } from 'ipfs-daemon'

const [repo, configJson] = process.argv.slice(2)
if (!repo || !configJson) {
  console.error('usage: node ipfs_daemon.mjs <repo path> <config JSON>')
  process.exit(2)
}

let daemon = null
let stopping = false
let started = false

async function stop () {
  if (stopping) return
  stopping = true
  if (!started) return // start() sees `stopping` and stops once it has finished
  try {
    await daemon.stop()
  } catch (err) {
    console.error('stop failed:', err)
    process.exit(1)
  }
  console.log('stopped')
  process.exit(0)
}

// Before start: a SIGTERM that lands while the node starts must still release the repo lock.
process.on('SIGTERM', stop)
process.on('SIGINT', stop)

try {
  daemon = new Daemon({
    repo,
    config: JSON.parse(configJson),
    offline: true,
    preload: { enabled: false },
    init: { emptyRepo: true },
    repoAutoMigrate: false
  })
  await daemon.start()
  started = true
} catch (err) {
  console.error('js-ipfs failed to start:', err && err.stack ? err.stack : err)
  try { if (daemon) await daemon.stop() } catch {}
  process.exit(1)
}

if (stopping) {
  stopping = false
  await stop()
} else {
  const addrs = (servers) => (servers || []).map(s => s.info.ma.toString())
  console.log('ready ' + JSON.stringify({
    api: addrs(daemon._httpApi && daemon._httpApi._apiServers),
    gateway: addrs(daemon._httpGateway && daemon._httpGateway._gatewayServers)
  }))
}
