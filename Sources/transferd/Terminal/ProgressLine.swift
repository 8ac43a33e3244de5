import Foundation
import TransferCore

/// The one-line progress display of `transferd get` on stderr.
///
/// On a terminal it redraws one line at most four times a second; otherwise
/// it prints only start, retry and finish lines (no escape codes in logs).
// @unchecked: every mutable field changes only under `lock`.
final class ProgressLine: @unchecked Sendable {
    private let name: String
    private let quiet: Bool
    private let lock = NSLock()
    private var started = Date()
    private var lastSample: (time: Date, written: Int64)?
    private var speed: Double = 0
    private var live = LiveLine()
    private var announced = false

    init(name: String, quiet: Bool) {
        self.name = name
        self.quiet = quiet
    }

    func handle(_ event: DownloadEvent) {
        guard !quiet else { return }
        lock.lock()
        defer { lock.unlock() }
        switch event {
        case .started(let total, let resumedFrom, let segments):
            started = Date()
            lastSample = (Date(), resumedFrom)
            guard let total else {
                // A fresh single stream learns its size from the first response: announce it then.
                announced = resumedFrom == 0 ? false : { line("\(name): resuming at \(Format.bytes(resumedFrom))", permanent: true); return true }()
                return
            }
            announced = true
            let resume = resumedFrom > 0 ? ", resuming at \(Format.bytes(resumedFrom))" : ""
            let connections = segments > 1 ? ", \(segments) connections" : ""
            line("\(name): \(Format.bytes(total))\(resume)\(connections)", permanent: true)
        case .progress(let written, let total, _):
            updateSpeed(written)
            if !announced, written > 0 {
                announced = true
                line("\(name): \(total.map(Format.bytes) ?? "size unknown")", permanent: true)
            }
            guard live.interactive else { return }
            line(progressText(written: written, total: total), permanent: false)
        case .retrying(let attempt, let delay, let reason, let resumeAt):
            if let resumeAt, delay == 0 {
                line("\(name): \(reason); resuming at \(Format.bytes(resumeAt))", permanent: true)
            } else {
                line("\(name): \(reason); retry \(attempt) in \(String(format: "%.1f", delay)) s", permanent: true)
            }
        case .restarted(let reason):
            line("\(name): starting over: \(reason)", permanent: true)
        case .verifying:
            if live.interactive { line("\(name): verifying SHA-256", permanent: false) }
        }
    }

    private func updateSpeed(_ written: Int64) {
        let now = Date()
        if let sample = lastSample {
            speed = RunProgress.smooth(speed, delta: max(0, written - sample.written),
                                       interval: now.timeIntervalSince(sample.time))
        }
        lastSample = (now, written)
    }

    private func progressText(written: Int64, total: Int64?) -> String {
        let rate = Format.rate(speed)
        guard let total, total > 0 else { return "\(name)  \(Format.bytes(written))  \(rate)" }
        let fraction = min(1, Double(written) / Double(total))
        let eta = speed > 0 ? Format.duration(Double(total - written) / speed) : "--:--"
        let barWidth = 20
        let filled = Int(fraction * Double(barWidth))
        let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: barWidth - filled)
        let text = String(format: "%@ [%@] %3d%%  %@ / %@  %@  ETA %@", name, bar, Int(fraction * 100),
                          Format.bytes(written), Format.bytes(total), rate, eta)
        return String(text.prefix(max(20, Output.terminalSize(fd: 2).columns - 1)))
    }

    private func line(_ text: String, permanent: Bool) {
        live.show(text, permanent: permanent)
    }

    /// Removes the live line before an error message.
    func clear() {
        lock.lock()
        defer { lock.unlock() }
        live.erase()
    }

    func finish(_ result: DownloadResult) {
        clear()
        guard !quiet else { return }
        if result.skipped {
            Output.err("\(result.path): already present and identical, skipped\n")
            return
        }
        let elapsed = max(result.elapsed, 0.001)
        let fetched = Double(result.bytesFetched)
        var text = "\(result.path): saved \(Format.bytes(result.size)) in \(String(format: "%.2f", elapsed)) s"
            + " (\(Format.rate(fetched / elapsed)))"
        if result.resumedFrom > 0 { text += ", resumed from \(Format.bytes(result.resumedFrom))" }
        if result.restarts > 0 { text += ", restarted \(result.restarts)×" }
        if result.sha256 != nil { text += ", sha256 ok" }
        Output.err(text + "\n")
    }
}
