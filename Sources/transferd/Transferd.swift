import Foundation
import TransferCore

/// Entry point: dispatches to a command and exits with its code.
@main
struct TransferdMain {
    static let usage = """
        usage: transferd COMMAND [options]

        commands:
          get URL        download one URL, resumably
          put PATH URL   upload a file: streamed PUT, or a multipart/form-data POST with --form
          run [QUEUE]    run the job queue (default ./queue.d) until nothing is runnable
          status [QUEUE] every job's state, progress and last error
          ingest [QUEUE] record waiting job files without running them
          add URL...     write a job file into the queue
          validate FILE  check job files without running them
          retry ID       queue a failed job again (--failed: all of them)
          cancel ID      cancel a job
          pause ID...    hold jobs until resumed (--all: the whole queue); running ones stop, progress kept
          resume ID...   queue held jobs again, from where they stopped (--all: the whole queue)
          prioritize ID... run jobs next (--priority N: set their priority)
          version        print versions of transferd and its libraries

        `transferd COMMAND --help` lists a command's options.

        Exit codes: 0 done, 1 transfer failed, 2 usage or configuration error (also a queue
        store that cannot be used: unreachable, refused, no rights, not transferd's),
        3 verification failed, 4 local file error (e.g. disk full), 5 destination exists,
        130 interrupted.

        """

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
        let code: ExitCode
        switch command {
        case "get":
            code = await GetCommand.run(arguments)
        case "put":
            code = await PutCommand.run(arguments)
        case "run":
            code = await RunCommand.run(arguments)
        case "ingest":
            code = QueueCommands.ingest(arguments)
        case "status":
            code = QueueCommands.status(arguments)
        case "add":
            code = QueueCommands.add(arguments)
        case "validate":
            code = QueueCommands.validate(arguments)
        case "retry":
            code = QueueCommands.retry(arguments)
        case "cancel":
            code = QueueCommands.cancel(arguments)
        case "pause":
            code = SteerCommands.pause(arguments)
        case "resume":
            code = SteerCommands.resume(arguments)
        case "prioritize":
            code = SteerCommands.prioritize(arguments)
        case "version", "--version":
            Output.out("transferd \(TransferdVersion.string)\n\(CurlTransport.libraryVersion)\n")
            code = .success
        case "help", "--help", "-h":
            Output.out(usage)
            code = .success
        default:
            let commands: Set<String> = ["get", "put", "run", "ingest", "status", "add", "validate", "retry", "cancel", "pause", "resume", "prioritize",
                                         "version", "help"]
            let guess = Spelling.closest(to: command, in: commands).map { " (did you mean '\($0)'?)" } ?? ""
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
