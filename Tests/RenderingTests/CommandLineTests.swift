import Foundation
import XCTest
import TransferCore
@testable import transferd

/// The argument parser, the CLI reference page and the shell completions: all three made from
/// the command table and each command's `CommandHelp`.
final class CommandLineTests: XCTestCase {
    private let specs = [OptionSpec("-o", "--output", value: "PATH", help: "where"),
                         OptionSpec("-c", "--connections", value: "N", help: "how many"),
                         OptionSpec("--include", value: "GLOB", help: "which"),
                         OptionSpec("--overwrite", help: "replace")]

    func testTheParserTakesEachSpellingOfAnOption() throws {
        let parsed = try ParsedArguments.parse(["a", "-o", "out", "--connections=4", "--include", "*.bin", "--include=*.txt",
                                                "--overwrite", "--", "--not-an-option", "-"], specs: specs, command: "get")
        XCTAssertEqual(parsed.positionals, ["a", "--not-an-option", "-"])
        XCTAssertEqual(parsed.value("--output"), "out", "-o is recorded under the long name")
        XCTAssertEqual(try parsed.integer("--connections", range: 1...64), 4)
        XCTAssertEqual(parsed.all("--include"), ["*.bin", "*.txt"])
        XCTAssertTrue(parsed.has("--overwrite"))
        XCTAssertFalse(parsed.has("--help"))
    }

    func testMistakesAreUsageErrorsThatSayWhatToType() {
        func error(_ arguments: [String]) -> String {
            do {
                _ = try ParsedArguments.parse(arguments, specs: specs, command: "get")
                return "no error"
            } catch {
                XCTAssertTrue(error is UsageError, "\(error)")
                return "\(error)"
            }
        }
        XCTAssertEqual(error(["--conections", "4"]), "unknown option --conections for 'get' (did you mean --connections?); see transferd get --help")
        XCTAssertEqual(error(["--outptu=x"]), "unknown option --outptu for 'get' (did you mean --output?); see transferd get --help")
        XCTAssertEqual(error(["--frobnicate"]), "unknown option --frobnicate for 'get'; see transferd get --help")
        XCTAssertEqual(error(["-o"]), "-o needs a value (PATH)")
        XCTAssertEqual(error(["--overwrite=yes"]), "--overwrite takes no value")
        XCTAssertThrowsError(try ParsedArguments.parse(["-c", "0"], specs: specs, command: "get").integer("--connections", range: 1...64))
    }

    // MARK: typed options

    /// The text of the usage error `body` throws, or "no error".
    private func usageError(_ body: () throws -> Void) -> String {
        do {
            try body()
            return "no error"
        } catch {
            XCTAssertTrue(error is UsageError, "\(error)")
            return "\(error)"
        }
    }

    func testGetOptionsAreTypedFromEachSpelling() throws {
        let options = GetOptions(try ParsedArguments.parse(
            ["https://example.com/a.iso", "-o", "out.iso", "-c", "4", "--mirror", "https://m1/a.iso", "--mirror=https://m2/a.iso",
             "--overwrite", "-j", "16", "--include", "*.bin", "--include", "*.txt", "-H", "A: 1", "--header", "B: 2",
             "--retries", "7", "--limit-rate", "10M", "--connect-timeout", "2.5", "--max-delete", "30", "-q"],
            specs: GetCommand.specs, command: "get"))
        XCTAssertEqual(options.positionals, ["https://example.com/a.iso"])
        XCTAssertEqual(options.output, "out.iso")
        XCTAssertEqual(try options.connections, 4)
        XCTAssertEqual(options.mirror, ["https://m1/a.iso", "https://m2/a.iso"], "a repeated flag keeps every value, in order")
        XCTAssertTrue(options.overwrite)
        XCTAssertFalse(options.skipExisting)
        XCTAssertEqual(try options.jobs, 16)
        XCTAssertEqual(options.include, ["*.bin", "*.txt"])
        XCTAssertTrue(options.quiet)
        XCTAssertEqual(options.transfer.header, ["A: 1", "B: 2"])
        XCTAssertEqual(try options.transfer.retries, 7)
        XCTAssertEqual(try options.transfer.limitRate, 10 << 20)
        XCTAssertEqual(try options.transfer.connectTimeout, 2.5)
        XCTAssertEqual(try options.sync.maxDelete, 30)
        XCTAssertFalse(options.sync.delete)
        XCTAssertTrue(options.given(GetCommand.jobs))
        XCTAssertTrue(options.given(GetCommand.include.spec))
        XCTAssertFalse(options.given(GetCommand.exclude))
    }

    func testAbsentOptionsReadAsTheirDefaults() throws {
        let get = GetOptions(try ParsedArguments.parse(["https://example.com/a"], specs: GetCommand.specs, command: "get"))
        XCTAssertNil(get.output)
        XCTAssertNil(try get.connections)
        XCTAssertEqual(get.mirror, [])
        XCTAssertFalse(get.overwrite)
        XCTAssertNil(get.transfer.transport)
        XCTAssertNil(try get.transfer.idleTimeout)
        XCTAssertEqual(try TransferFlags.lowSpeed(get.transfer)?.bytesPerSecond, LowSpeedLimit.default.bytesPerSecond)
        XCTAssertEqual(try TransferFlags.retry(get.transfer).maxAttempts, RetryPolicy.default.maxAttempts)
        XCTAssertEqual(try SyncFlags.options(get.sync).maxDeleteShare, SyncOptions().maxDeleteShare)

        let run = RunCommandOptions(try ParsedArguments.parse([], specs: RunCommand.specs, command: "run"))
        XCTAssertFalse(run.watch)
        XCTAssertNil(try run.jobs)
        XCTAssertNil(try run.lease)
        XCTAssertNil(run.queue.queue)
        XCTAssertNil(run.queue.worker)
        XCTAssertEqual((try QueueFlags.layout(run.queue, command: "run").directory as NSString).lastPathComponent, "queue.d")
    }

    func testCheckedValuesAreRefusedInTheWordsOfBefore() throws {
        func get(_ argv: [String]) throws -> GetOptions {
            GetOptions(try ParsedArguments.parse(["https://example.com/a"] + argv, specs: GetCommand.specs, command: "get"))
        }
        XCTAssertEqual(usageError { _ = try get(["-c", "0"]).connections },
                       "--connections must be a whole number from 1 to 64, not '0'")
        XCTAssertEqual(usageError { _ = try get(["--jobs=many"]).jobs }, "--jobs must be a whole number from 1 to 256, not 'many'")
        XCTAssertEqual(usageError { _ = try get(["--idle-timeout", "inf"]).transfer.idleTimeout },
                       "--idle-timeout must be a number of seconds above 0 and at most 31536000 (a year), not 'inf'")
        XCTAssertEqual(usageError { _ = try get(["--limit-rate", "0"]).transfer.limitRate },
                       "--limit-rate must be a size like 500K, 10M or 1G, not '0'")
        XCTAssertEqual(usageError { _ = try TransferFlags.lowSpeed(get(["--speed-limit", "fast"]).transfer) },
                       "--speed-limit must be a size like 500K, 10M or 1G, not 'fast'")
        XCTAssertNil(try TransferFlags.lowSpeed(get(["--speed-limit", "0"]).transfer), "--speed-limit 0: no floor")
        XCTAssertEqual(usageError { _ = try SyncFlags.options(get(["--max-delete", "101", "--delete"]).sync) },
                       "--max-delete must be a whole number from 0 to 100, not '101'")
        XCTAssertEqual(usageError { _ = try SyncFlags.options(get(["--force"]).sync) }, "--force goes with --delete")
        XCTAssertEqual(usageError { try SyncFlags.refuseForOne(get(["--dry-run"]).sync, what: "a") },
                       "--dry-run is for a bulk copy (a folder or a prefix); a is one object")

        // One option, bounded by each command its own way.
        let run = RunCommandOptions(try ParsedArguments.parse(["--jobs", "1000", "--max-redirects", "80"], specs: RunCommand.specs, command: "run"))
        XCTAssertEqual(try run.jobs, 1000)
        XCTAssertEqual(try run.transfer.maxRedirects, 80)
        let copy = CopyOptions(try ParsedArguments.parse(["--max-redirects", "80"], specs: CopyCommand.specs, command: "copy"))
        XCTAssertEqual(usageError { _ = try copy.maxRedirects }, "--max-redirects must be a whole number from 0 to 50, not '80'")

        // A value is checked where the command reads it: one it takes and has no use for is not refused.
        let put = PutOptions(try ParsedArguments.parse(["f", "https://h/f", "--speed-time", "-1"], specs: PutCommand.specs, command: "put"))
        XCTAssertEqual(put.positionals, ["f", "https://h/f"])
        XCTAssertThrowsError(try put.transfer.speedTime)
    }

    func testAMistypedOptionIsAnsweredWithTheNearestOfTheCommands() {
        func parse(_ argv: [String], _ specs: [OptionSpec], _ command: String) -> String {
            usageError { _ = try ParsedArguments.parse(argv, specs: specs, command: command) }
        }
        XCTAssertEqual(parse(["https://h/a", "--ouput", "x"], GetCommand.specs, "get"),
                       "unknown option --ouput for 'get' (did you mean --output?); see transferd get --help")
        XCTAssertEqual(parse(["--conections=4"], RunCommand.specs, "run"),
                       "unknown option --conections for 'run' (did you mean --connections?); see transferd run --help")
        XCTAssertEqual(parse(["--finish-runing"], SteerCommands.pauseHelp.options, "pause"),
                       "unknown option --finish-runing for 'pause' (did you mean --finish-running?); see transferd pause --help")
        XCTAssertEqual(parse(["--retries"], PutCommand.specs, "put"), "--retries needs a value (N)")
        XCTAssertEqual(parse(["--tus=yes"], PutCommand.specs, "put"), "--tus takes no value")
    }

    func testTheSteeringAndQueueCommandsReadTheirOwnFlags() throws {
        func parsed(_ argv: [String], _ help: CommandHelp) throws -> ParsedArguments {
            try ParsedArguments.parse(argv, specs: help.options, command: help.name)
        }
        XCTAssertEqual(try JobSelection(PauseOptions(parsed(["--state", "running"], SteerCommands.pauseHelp))), JobSelection(state: .running))
        XCTAssertEqual(try JobSelection(ResumeOptions(parsed(["--host", "Example.COM"], SteerCommands.resumeHelp))),
                       JobSelection(host: "example.com"))
        XCTAssertEqual(try JobSelection(PauseOptions(parsed(["a1", "b2"], SteerCommands.pauseHelp))), JobSelection(ids: ["a1", "b2"]))
        XCTAssertEqual(usageError { _ = try JobSelection(PauseOptions(parsed(["--all", "a1"], SteerCommands.pauseHelp))) },
                       "give job IDs, --state STATE, --host HOST or --all (one of them)")
        XCTAssertEqual(usageError { _ = try JobSelection(ResumeOptions(parsed([], SteerCommands.resumeHelp))) },
                       "give job IDs, --host HOST or --all (one of them)")
        let limit = LimitOptions(try parsed(["--jobs", "default", "--per-host=4", "--queue", "q"], SteerCommands.limitHelp))
        XCTAssertEqual(limit.jobs, "default")
        XCTAssertEqual(limit.perHost, "4")
        XCTAssertFalse(limit.clear)
        XCTAssertEqual(QueueOptions(limit.arguments).queue, "q")
        let status = StatusOptions(try parsed(["-w", "--interval", "0.25", "--root", "/r"], QueueCommands.statusHelp))
        XCTAssertTrue(status.watch)
        XCTAssertEqual(try status.interval, 0.25)
        XCTAssertEqual(status.queue.root, "/r")
        XCTAssertFalse(status.json)
    }

    /// Each command's `specs` list is made from its `Flag` constants; the names a command reads are the ones it lists.
    func testSpecsAreMadeFromTheFlags() {
        XCTAssertEqual(Array(GetCommand.specs.prefix(3).map(\.key)), [GetCommand.output.name, GetCommand.connections.name, GetCommand.mirror.name])
        XCTAssertEqual(GetCommand.output.spec.names, ["-o", "--output"])
        XCTAssertEqual(GetCommand.output.name, "--output")
        XCTAssertTrue(CopyCommand.specs.contains { $0.key == CopyCommand.maxRedirects.name })
        XCTAssertFalse(CopyCommand.specs.contains { $0.key == TransferFlags.limitRate.name }, "copy takes no --limit-rate")
        XCTAssertFalse(RunCommand.specs.contains { $0.key == TransferFlags.header.name }, "run takes no --header")
        XCTAssertTrue(RunCommand.specs.contains { $0.key == QueueFlags.worker.name })
    }

    func testEveryCommandsOptionsAreWellFormedAndUnique() {
        for command in TransferdMain.commands {
            let names = command.help.options.flatMap(\.names)
            XCTAssertEqual(Set(names).count, names.count, "\(command.name) names an option twice: \(names)")
            for name in names {
                XCTAssertTrue(name.range(of: #"^(-[a-zA-Z]|--[a-z0-9][a-z0-9-]*)$"#, options: .regularExpression) != nil,
                              "\(command.name): \(name)")
            }
            XCTAssertTrue(names.contains("--help"), "\(command.name) takes --help")
            XCTAssertEqual(command.help.name, command.name)
            XCTAssertTrue(command.help.usage.hasPrefix("transferd \(command.name)"), command.help.usage)
        }
    }

    func testTheCLIReferencePageIsTheOneTheCommandTableMakes() throws {
        let page = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("docs/cli.md")
        let made = CLIReference.markdown(TransferdMain.commands)
        if ProcessInfo.processInfo.environment["TRANSFERD_UPDATE_GOLDEN"] == "1" {
            try made.write(to: page, atomically: true, encoding: .utf8)
        }
        let written = try String(contentsOf: page, encoding: .utf8)
        XCTAssertEqual(written, made, "docs/cli.md is out of date: TRANSFERD_UPDATE_GOLDEN=1 swift test --filter CommandLineTests")
        for command in TransferdMain.commands {
            XCTAssertTrue(written.contains("\n## \(command.name)\n"), command.name)
        }
    }

    // MARK: completions

    /// Runs `program` with `arguments`; its standard output and exit status.
    private func run(_ program: String, _ arguments: [String]) throws -> (String, Int32) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: program)
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (String(decoding: data, as: UTF8.self), process.terminationStatus)
    }

    private func script(_ text: String, _ name: String) throws -> String {
        let path = NSTemporaryDirectory() + "/transferd-completion-\(UUID().uuidString)-\(name)"
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        addTeardownBlock { unlink(path) }
        return path
    }

    func testBashCompletesCommandsOptionsAndTheirChoices() throws {
        let path = try script(Completions.bash(TransferdMain.commands), "transferd.bash")
        func complete(_ words: [String]) throws -> [String] {
            let quoted = words.map { "'\($0)'" }.joined(separator: " ")
            let (output, status) = try run("/bin/bash", ["--norc", "--noprofile", "-c",
                "source '\(path)'; COMP_WORDS=(\(quoted)); COMP_CWORD=\(words.count - 1); _transferd; printf '%s\\n' \"${COMPREPLY[@]}\""])
            XCTAssertEqual(status, 0, output)
            return output.split(separator: "\n").map(String.init)
        }
        XCTAssertEqual(try complete(["transferd", "ru"]), ["run"])
        XCTAssertEqual(Set(try complete(["transferd", "p"])), ["put", "pause", "prioritize", "purge"])
        XCTAssertEqual(try complete(["transferd", "run", "--wat"]), ["--watch"])
        XCTAssertEqual(try complete(["transferd", "get", "--transport", "c"]), ["curl"])
        XCTAssertEqual(try complete(["transferd", "completion", "--he"]), ["--help"])
        XCTAssertEqual(try complete(["transferd", "limit", "--per-h"]), ["--per-host"])
    }

    func testZshAndFishScriptsAreValid() throws {
        for (shell, text, check) in [("/usr/bin/zsh", Completions.zsh(TransferdMain.commands), ["-n"]),
                                     ("/usr/bin/fish", Completions.fish(TransferdMain.commands), ["--no-execute"])] {
            guard FileManager.default.isExecutableFile(atPath: shell) else {
                XCTFail("\(shell) is not installed: scripts/setup installs it")
                continue
            }
            let path = try script(text, (shell as NSString).lastPathComponent)
            let (output, status) = try run(shell, check + [path])
            XCTAssertEqual(status, 0, "\(shell): \(output)")
        }
        // zsh for real: the file loads and defines its completion function.
        let zshPath = try script(Completions.zsh(TransferdMain.commands), "_transferd")
        let (defined, status) = try run("/usr/bin/zsh", ["-f", "-c", "source \(zshPath) 2>/dev/null; print ${+functions[_transferd]}"])
        XCTAssertEqual(status, 0, defined)
        XCTAssertEqual(defined, "1\n", "the zsh function is defined")
        let fish = Completions.fish(TransferdMain.commands)
        XCTAssertTrue(fish.contains("-a get -d 'download one URL, resumably'"), fish)
        XCTAssertTrue(fish.contains("__fish_seen_subcommand_from get' -l transport -x -a 'curl urlsession'"), fish)
    }
}
