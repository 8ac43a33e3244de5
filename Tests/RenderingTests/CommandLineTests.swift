import Foundation
import XCTest
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
