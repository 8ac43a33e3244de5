import Foundation
import TransferCore

/// How a command shows what it does: the progress rendering, colour, and the debug log.
struct OutputFlags {
    static let progress = Flag.string("--progress", value: "tty|plain", help: "live view (default on a terminal) or plain lines (default otherwise)")
    static let progressInterval = Flag.seconds("--progress-interval",
                                               help: "seconds between progress lines in plain and --json output (default: 10, --json: 1)")
    static let json = Flag.presence("--json", help: "one JSON object per event on stdout (schema in docs/watching.md)")
    static let quiet = Flag.presence("-q", "--quiet", help: "print errors only (on stderr)")
    static let noColor = Flag.presence("--no-color", help: "no colour in the live view (also: NO_COLOR=1)")
    static let verbose = Flag.presence("-v", "--verbose", help: "log every request and response, secrets redacted")
    static let logFile = Flag.string("--log-file", value: "PATH", help: "append that log to PATH instead of the screen")

    static let specs: [OptionSpec] = [progress.spec, progressInterval.spec, json.spec, quiet.spec, noColor.spec, verbose.spec, logFile.spec]

    var mode: ProgressMode
    var interval: TimeInterval
    var color: Bool
    var verbose: Bool
    var logFile: DebugLogFile?

    init(_ arguments: ParsedArguments, stdoutIsTerminal: Bool = Output.stdoutIsTerminal) throws {
        let exclusive = [Self.json.spec, Self.quiet.spec, Self.progress.spec].filter { arguments.given($0) }.map(\.key)
        guard exclusive.count <= 1 else { throw UsageError("\(exclusive.joined(separator: " and ")) cannot be used together") }
        if arguments[Self.json] {
            mode = .json
        } else if arguments[Self.quiet] {
            mode = .quiet
        } else if let value = arguments[Self.progress] {
            guard let chosen = ProgressMode(rawValue: value), chosen == .tty || chosen == .plain else {
                throw UsageError("--progress must be tty or plain, not '\(value)' (see also --json and --quiet)")
            }
            mode = chosen
        } else {
            let dumb = ProcessInfo.processInfo.environment["TERM"] == "dumb"
            mode = stdoutIsTerminal && !dumb ? .tty : .plain
        }
        interval = try arguments.read(Self.progressInterval) ?? (mode == .json ? 1 : 10)
        color = mode == .tty && !arguments[Self.noColor] && Output.colorAllowed()
        verbose = arguments[Self.verbose]
        logFile = try arguments[Self.logFile].map(DebugLogFile.init(path:))
    }

    func renderer(failedFolder: String) -> RunRenderer {
        let context = RenderContext(color: color, failedFolder: failedFolder)
        switch mode {
        case .tty:
            TerminalRestore.activate()
            return TTYRenderer(context: context)
        case .plain: return PlainRenderer(context: context, interval: interval)
        case .json: return JSONRenderer(context: context, interval: interval)
        case .quiet: return QuietRenderer(context: context)
        }
    }

    /// Where the debug log goes: the file, or the renderer (which keeps it
    /// out of the live area's way), or nowhere.
    func requestLog(_ renderer: RunRenderer) -> (@Sendable (String) -> Void)? {
        if let logFile { return { logFile.write($0) } }
        guard verbose else { return nil }
        return { [weak renderer] in renderer?.log($0) }
    }
}
