import Foundation
import TransferCore

/// `transferd status --watch`: the live view of a queue that another process
/// is running, read from the progress snapshots the run writes into the store
/// twice a second. On a terminal it redraws in place; otherwise it prints a
/// progress line per refresh. Ctrl-C ends it with the terminal restored.
struct StatusWatch {
    var store: QueueStore
    let layout: QueueLayout
    let interval: TimeInterval
    let color: Bool
    /// For a queue no run has worked yet (`store` is empty, in memory): the queue's store once
    /// a run has made it, else nil; asked at each refresh until it gives one.
    var reopen: (() -> QueueStore?)?

    init(store: QueueStore, layout: QueueLayout, interval: TimeInterval, color: Bool) {
        self.store = store
        self.layout = layout
        self.interval = interval
        self.color = color
    }

    /// Whether the queue folder holds a store a run made (a file with something in it).
    static func hasStore(_ layout: QueueLayout) -> Bool {
        var info = stat()
        return lstat(layout.database, &info) == 0 && info.st_size > 0
    }

    mutating func run() throws -> ExitCode {
        let stop = Locked(false)
        let signals = SignalHandler { stop.withLock { $0 = true } }
        defer { signals.restore() }
        let interactive = Output.stdoutIsTerminal
        let screen = TerminalScreen(write: Output.out)
        if interactive { TerminalRestore.activate() }
        defer {
            if interactive {
                screen.end(permanent: [])
                TerminalRestore.deactivate()
            }
        }
        while !stop.current {
            if let reopen, let opened = reopen() {
                store = opened
                self.reopen = nil
            }
            let now = Date()
            let active = try store.jobs(in: .running) + store.jobs(in: .finishing) + store.jobs(in: .waiting)
            let progress = RunProgress(active: active, counts: try store.counts(), at: now)
            if interactive {
                let size = Output.terminalSize()
                let view = LiveView(width: size.columns, maxJobLines: max(1, min(12, size.rows / 2 - 1)),
                                    style: TerminalStyle(color: color))
                let header = TerminalStyle(color: color).dim(
                    Text.truncated("\(runState()); watching \(layout.directory) (refresh \(Format.seconds(interval)); Ctrl-C to stop)",
                                   to: size.columns - 1))
                screen.draw(permanent: [], live: [header] + view.lines(progress, now: now))
            } else {
                Output.out(PlainRenderer.progressLine(progress, now: now) + "; \(runState())\n")
            }
            // Sleep in small steps so Ctrl-C ends the view at once.
            let deadline = Date().addingTimeInterval(interval)
            while !stop.current && Date() < deadline { usleep(50_000) }
        }
        return .success
    }

    /// Whether a `transferd run` is working the queue right now.
    private func runState() -> String {
        if store.leaseSeconds != nil {
            let workers = (try? store.workers()) ?? []
            return "\(workers.count) worker\(workers.count == 1 ? "" : "s") on the shared store"
        }
        return RunLock.activeRun(path: layout.lockFile).map { "run active (pid \($0))" } ?? "no run active"
    }
}
