import Foundation

/// Writes to stdout/stderr through file descriptors (the C `stdout` global is
/// not concurrency-safe in Swift 6).
enum Output {
    static func out(_ text: String) { write(1, text) }
    static func err(_ text: String) { write(2, text) }

    private static func write(_ fd: Int32, _ text: String) {
        var bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeMutableBytes { Foundation.write(fd, $0.baseAddress! + offset, $0.count - offset) }
            if n <= 0 { return }
            offset += n
        }
    }

    static var stderrIsTerminal: Bool { isatty(2) == 1 }
    static var stdoutIsTerminal: Bool { isatty(1) == 1 }

    /// Columns and rows of the terminal on `fd` (80×24 when it is not one).
    static func terminalSize(fd: Int32 = 1) -> (columns: Int, rows: Int) {
        var size = winsize()
        guard ioctl(fd, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 else { return (80, 24) }
        return (Int(size.ws_col), Int(max(size.ws_row, 4)))
    }

    /// Colour unless `NO_COLOR` is set (https://no-color.org) or TERM is dumb.
    static func colorAllowed(environment: [String: String] = ProcessInfo.processInfo.environment) -> Bool {
        if let value = environment["NO_COLOR"], !value.isEmpty { return false }
        return environment["TERM"] != "dumb"
    }
}

/// Human-readable sizes, rates and durations.
enum Format {
    static func bytes(_ value: Int64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var amount = Double(value)
        var unit = 0
        while amount >= 1024 && unit < units.count - 1 {
            amount /= 1024
            unit += 1
        }
        return unit == 0 ? "\(value) B" : String(format: "%.1f %@", amount, units[unit])
    }

    static func rate(_ bytesPerSecond: Double) -> String {
        bytes(Int64(bytesPerSecond)) + "/s"
    }

    /// `0.42 s`, `12.3 s`, or `4:05` past a minute.
    static func seconds(_ value: Double) -> String {
        if value < 10 { return String(format: "%.2f s", value) }
        if value < 60 { return String(format: "%.1f s", value) }
        return duration(value)
    }

    static func duration(_ seconds: Double) -> String {
        guard seconds.isFinite, seconds >= 0 else { return "--:--" }
        let total = Int(seconds.rounded())
        if total >= 3600 { return String(format: "%d:%02d:%02d", total / 3600, total / 60 % 60, total % 60) }
        return String(format: "%d:%02d", total / 60, total % 60)
    }
}
