import Foundation
import TransferCore

/// A command: its name, what `transferd --help` says of it, and what runs it.
struct Command: Sendable {
    let name: String
    /// The arguments as the usage line shows them.
    let arguments: String
    let summary: String
    /// Its usage, summary and options, for `--help`, docs/cli.md and the completions.
    let help: CommandHelp
    let run: @Sendable ([String]) async -> ExitCode

    init(name: String, arguments: String, summary: String, help: CommandHelp? = nil,
         run: @escaping @Sendable ([String]) async -> ExitCode) {
        self.name = name
        self.arguments = arguments
        self.summary = summary
        self.help = help ?? CommandHelp(name: name, usage: "transferd \(name)", summary: summary,
                                        options: [StandardFlags.help.spec])
        self.run = run
    }
}

/// Entry point: dispatches to a command and exits with its code.
@main
struct TransferdMain {
    /// Every command, in the order `transferd --help` lists them: the one place a command is named.
    static let commands: [Command] = [
        Command(name: "get", arguments: "URL", summary: "download one URL, resumably", help: GetCommand.help) { await GetCommand.run($0) },
        Command(name: "put", arguments: "PATH URL",
                summary: "upload a file: streamed PUT, or a multipart/form-data POST with --form", help: PutCommand.help) { await PutCommand.run($0) },
        Command(name: "copy", arguments: "SRC DST",
                summary: "copy an S3 object or prefix to another on the same endpoint, made by the server", help: CopyCommand.help) {
            await CopyCommand.run($0)
        },
        Command(name: "run", arguments: "[--queue DIR]",
                summary: "run the job queue (default ./queue.d) until nothing is runnable", help: RunCommand.help) { await RunCommand.run($0) },
        Command(name: "status", arguments: "[--queue DIR]", summary: "every job's state, progress and last error", help: QueueCommands.statusHelp) { QueueCommands.status($0) },
        Command(name: "ingest", arguments: "[--queue DIR]", summary: "record waiting job files without running them", help: QueueCommands.ingestHelp) { QueueCommands.ingest($0) },
        Command(name: "add", arguments: "URL...", summary: "write a job file into the queue", help: QueueCommands.addHelp) { QueueCommands.add($0) },
        Command(name: "validate", arguments: "FILE", summary: "check job files without running them", help: QueueCommands.validateHelp) { QueueCommands.validate($0) },
        Command(name: "retry", arguments: "ID", summary: "queue a failed job again (--failed: all of them)", help: QueueCommands.retryHelp) { QueueCommands.retry($0) },
        Command(name: "cancel", arguments: "ID", summary: "cancel a job", help: QueueCommands.cancelHelp) { QueueCommands.cancel($0) },
        Command(name: "pause", arguments: "ID...",
                summary: "hold jobs until resumed (--all: the whole queue); running ones stop, progress kept", help: SteerCommands.pauseHelp) { SteerCommands.pause($0) },
        Command(name: "resume", arguments: "ID...",
                summary: "queue held jobs again, from where they stopped (--all: the whole queue)", help: SteerCommands.resumeHelp) { SteerCommands.resume($0) },
        Command(name: "prioritize", arguments: "ID...", summary: "run jobs next (--priority N: set their priority)", help: SteerCommands.prioritizeHelp) {
            SteerCommands.prioritize($0)
        },
        Command(name: "limit", arguments: "[RATE]",
                summary: "show or set the queue's bandwidth limit (UP:DOWN, off, a timetable), running runs too",
                help: SteerCommands.limitHelp) {
            SteerCommands.limit($0)
        },
        Command(name: "purge", arguments: "", summary: "forget ended jobs (--state, --older-than) to keep a long-lived queue small",
                help: SteerCommands.purgeHelp) {
            SteerCommands.purge($0)
        },
        Command(name: "completion", arguments: "bash|zsh|fish", summary: "print a shell completion script (see docs/cli.md)",
                help: Completions.help) { Completions.run($0) },
        Command(name: "version", arguments: "", summary: "print versions of transferd and its libraries") { _ in
            Output.out("transferd \(TransferdVersion.string)\n\(CurlTransport.libraryVersion)\n")
            return .success
        },
    ]

    /// Other names a command answers to.
    static let aliases = ["--version": "version"]

    static var usage: String {
        let width = commands.map { $0.name.count + 1 + $0.arguments.count }.max() ?? 0
        let lines = commands.map { command in
            let head = command.arguments.isEmpty ? command.name : "\(command.name) \(command.arguments)"
            return "  " + head.padding(toLength: width + 2, withPad: " ", startingAt: 0) + command.summary
        }
        return """
            usage: transferd COMMAND [options]

            commands:
            \(lines.joined(separator: "\n"))

            `transferd COMMAND --help` lists a command's options.

            Exit codes: 0 done, 1 transfer failed, 2 usage or configuration error (also a queue
            store that cannot be used: unreachable, refused, no rights, not transferd's),
            3 verification failed, 4 local file error (e.g. disk full), 5 destination exists,
            130 interrupted.

            """
    }

    static func main() async {
        #if canImport(Glibc)
        // Few malloc arenas: transfer threads allocate many short-lived
        // buffers, and one arena per thread multiplied peak RSS (measured:
        // 8 URLSession connections, 95 MiB with the default). One arena made
        // every thread queue on its lock: 10,000 small queue jobs took 1.14 s
        // with 1 and 1.01 s with 4, whose peak RSS was the same with curl and
        // 58 instead of 44 MiB for 8 URLSession connections.
        _ = glibcMallopt(glibcMArenaMax, 4)
        // Freed buffers stay with the process. Each transfer's libcurl handle takes a 256 KiB
        // receive buffer; with glibc's defaults such blocks came from mmap or were trimmed back
        // to the kernel when freed, and every job faulted its pages in again. 1,000 x 256 KiB
        // through the queue: 13,950 minor page faults with the defaults, 3,551 with these; 0.60
        // CPU-seconds against 0.66, 0.51 s against 0.53 s (medians of 8 paired runs). Peak RSS
        // for 1 GiB stayed 30-33 MiB (curl backend) and 43-48 MiB (urlsession).
        _ = glibcMallopt(glibcMMmapThreshold, 4 << 20)
        _ = glibcMallopt(glibcMTrimThreshold, 64 << 20)
        // As many open files as the hard limit allows: a queue run keeps each finished download
        // open (its lock held) until its batch is renamed into place, and a soft limit of 1,024
        // would fail downloads of small files while a slow disk syncs a batch.
        var files = rlimit()
        if getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &files) == 0 && files.rlim_cur < files.rlim_max {
            files.rlim_cur = files.rlim_max
            _ = setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &files)
        }
        #endif
        var arguments = Array(CommandLine.arguments.dropFirst())
        guard let command = arguments.first else {
            Output.err(usage)
            exit(ExitCode.usage.rawValue)
        }
        arguments.removeFirst()
        let name = aliases[command] ?? command
        let code: ExitCode
        if let found = commands.first(where: { $0.name == name }) {
            code = await found.run(arguments)
        } else if ["help", "--help", "-h"].contains(command) {
            Output.out(usage)
            code = .success
        } else {
            let guess = Spelling.closest(to: command, in: Set(commands.map(\.name) + ["help"])).map { " (did you mean '\($0)'?)" } ?? ""
            Output.err("transferd: unknown command '\(command)'\(guess)\n\n" + usage)
            code = .usage
        }
        exit(code.rawValue)
    }
}

enum TransferdVersion {
    static let string = "0.1.0"
}

#if canImport(Glibc)
/// glibc's `mallopt` (malloc.h is not part of Swift's Glibc module).
@_silgen_name("mallopt")
private func glibcMallopt(_ parameter: Int32, _ value: Int32) -> Int32
/// `M_ARENA_MAX` from malloc.h.
private let glibcMArenaMax: Int32 = -8
/// `M_MMAP_THRESHOLD` from malloc.h.
private let glibcMMmapThreshold: Int32 = -3
/// `M_TRIM_THRESHOLD` from malloc.h.
private let glibcMTrimThreshold: Int32 = -1
#endif
