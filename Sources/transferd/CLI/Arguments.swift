import Foundation
import TransferCore

/// A command-line option: its spellings, whether it takes a value, and its help text.
struct OptionSpec: Sendable {
    let names: [String]
    let valueName: String?
    let help: String

    init(_ names: String..., value: String? = nil, help: String) {
        self.init(names: names, value: value, help: help)
    }

    init(names: [String], value: String? = nil, help: String) {
        self.names = names
        self.valueName = value
        self.help = help
    }

    var key: String { names.first { $0.hasPrefix("--") } ?? names[0] }
}

/// The parsed command line of one command.
struct ParsedArguments {
    var positionals: [String] = []
    private var values: [String: [String]] = [:]

    func has(_ key: String) -> Bool { values[key] != nil }
    func value(_ key: String) -> String? { values[key]?.last }
    func all(_ key: String) -> [String] { values[key] ?? [] }

    mutating func record(_ key: String, _ value: String) { values[key, default: []].append(value) }

    /// Parses `arguments` against `specs`: `--name value`, `--name=value`, `-n value`, `--` ends options.
    static func parse(_ arguments: [String], specs: [OptionSpec], command: String) throws -> ParsedArguments {
        var parsed = ParsedArguments()
        var index = 0
        var optionsEnded = false
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if optionsEnded || !argument.hasPrefix("-") || argument == "-" {
                parsed.positionals.append(argument)
                continue
            }
            if argument == "--" {
                optionsEnded = true
                continue
            }
            var name = argument
            var inlineValue: String?
            if argument.hasPrefix("--"), let equals = argument.firstIndex(of: "=") {
                name = String(argument[..<equals])
                inlineValue = String(argument[argument.index(after: equals)...])
            }
            guard let spec = specs.first(where: { $0.names.contains(name) }) else {
                let guess = Spelling.closest(to: name, in: Set(specs.flatMap(\.names))).map { " (did you mean \($0)?)" } ?? ""
                throw UsageError("unknown option \(name) for '\(command)'\(guess); see transferd \(command) --help")
            }
            if let valueName = spec.valueName {
                if let inlineValue {
                    parsed.record(spec.key, inlineValue)
                } else {
                    guard index < arguments.count else { throw UsageError("\(name) needs a value (\(valueName))") }
                    parsed.record(spec.key, arguments[index])
                    index += 1
                }
            } else {
                guard inlineValue == nil else { throw UsageError("\(name) takes no value") }
                parsed.record(spec.key, "")
            }
        }
        return parsed
    }

    func integer(_ key: String, range: ClosedRange<Int>) throws -> Int? {
        try value(key).map { try OptionValue.integer($0, option: key, range: range) }
    }

    func seconds(_ key: String) throws -> Double? {
        try value(key).map { try OptionValue.seconds($0, option: key) }
    }

    func byteSize(_ key: String) throws -> Int64? {
        try value(key).map { try OptionValue.byteSize($0, option: key) }
    }
}

/// The checks of an option's value, with the words a mistake is told in (the same for every
/// command, and for a value read by hand, like `--speed-limit`'s after its `0`).
enum OptionValue {
    static func integer(_ text: String, option: String, range: ClosedRange<Int>) throws -> Int {
        guard let number = Int(text), range.contains(number) else {
            throw UsageError("\(option) must be a whole number from \(range.lowerBound) to \(range.upperBound), not '\(text)'")
        }
        return number
    }

    static func seconds(_ text: String, option: String) throws -> Double {
        // Finite and at most a year: `Int(seconds * 1000)` traps on inf and 1e300.
        guard let number = Double(text), number.isFinite, number > 0, number <= 31_536_000 else {
            throw UsageError("\(option) must be a number of seconds above 0 and at most 31536000 (a year), not '\(text)'")
        }
        return number
    }

    static func byteSize(_ text: String, option: String) throws -> Int64 {
        guard let bytes = ByteSize.parse(text), bytes > 0 else {
            throw UsageError("\(option) must be a size like 500K, 10M or 1G, not '\(text)'")
        }
        return bytes
    }
}

/// A mistake on the command line: exit code 2.
struct UsageError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// What a command says of itself: the one place its usage, summary and options are written,
/// from which `--help`, the CLI reference (docs/cli.md) and the shell completions are made.
struct CommandHelp: Sendable {
    let name: String
    let usage: String
    let summary: String
    let options: [OptionSpec]

    /// The `--help` text.
    var text: String { helpText(usage: usage, summary: summary, specs: options) }
}

/// Renders `--help` text for a command.
func helpText(usage: String, summary: String, specs: [OptionSpec]) -> String {
    var lines = ["usage: \(usage)", "", summary, "", "options:"]
    for spec in specs {
        var left = spec.names.joined(separator: ", ")
        if let value = spec.valueName { left += " \(value)" }
        let padding = String(repeating: " ", count: max(2, 30 - left.count))
        lines.append("  \(left)\(padding)\(spec.help)")
    }
    return lines.joined(separator: "\n") + "\n"
}
