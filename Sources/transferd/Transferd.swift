import Foundation
import TransferCore

/// Entry point: dispatches to a command and exits with its code.
@main
struct TransferdMain {
    static let usage = """
        usage: transferd COMMAND [options]

        commands:
          get URL        download one URL, resumably (transferd get --help)
          version        print versions of transferd and its libraries

        Exit codes: 0 done, 1 transfer failed, 2 usage error, 3 verification failed,
        4 local file error (e.g. disk full), 5 destination exists, 130 interrupted.

        """

    static func main() async {
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
        case "version", "--version":
            Output.out("transferd \(TransferdVersion.string)\n\(CurlTransport.libraryVersion)\n")
            code = .success
        case "help", "--help", "-h":
            Output.out(usage)
            code = .success
        default:
            Output.err("transferd: unknown command '\(command)'\n\n" + usage)
            code = .usage
        }
        exit(code.rawValue)
    }
}

enum TransferdVersion {
    static let string = "0.1.0"
}
