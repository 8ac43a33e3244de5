import Foundation

/// A typed option: its `OptionSpec`, the one place its names are written, and how its value is
/// read from the parsed command line. Commands read `Flag`s, never option names as strings,
/// so a misspelt option is a compile error.
struct Flag<Value>: Sendable {
    let spec: OptionSpec
    private let reader: @Sendable (ParsedArguments, String) throws -> Value

    init(_ spec: OptionSpec, read: @escaping @Sendable (ParsedArguments, String) throws -> Value) {
        self.spec = spec
        self.reader = read
    }

    /// The name values are recorded under, and that messages give: `--output` for `-o, --output`.
    var name: String { spec.key }

    /// Its value in `arguments`; a value it does not take is a `UsageError`.
    func read(_ arguments: ParsedArguments) throws -> Value { try reader(arguments, spec.key) }
}

extension Flag where Value == Bool {
    /// An option without a value: given or not.
    static func presence(_ names: String..., help: String) -> Flag {
        Flag(OptionSpec(names: names, help: help)) { arguments, key in arguments.has(key) }
    }
}

extension Flag where Value == String? {
    /// An option's value as given (the last, when it is given twice).
    static func string(_ names: String..., value: String, help: String) -> Flag {
        Flag(OptionSpec(names: names, value: value, help: help)) { arguments, key in arguments.value(key) }
    }
}

extension Flag where Value == [String] {
    /// A repeatable option: every value, in the order given.
    static func repeated(_ names: String..., value: String, help: String) -> Flag {
        Flag(OptionSpec(names: names, value: value, help: help)) { arguments, key in arguments.all(key) }
    }
}

extension Flag where Value == Int? {
    /// A whole number in `range`.
    static func integer(_ names: String..., value: String, range: ClosedRange<Int>, help: String) -> Flag {
        integer(OptionSpec(names: names, value: value, help: help), range: range)
    }

    /// `spec` read as a whole number in `range` (a shared option one command bounds its own way).
    static func integer(_ spec: OptionSpec, range: ClosedRange<Int>) -> Flag {
        Flag(spec) { arguments, key in try arguments.integer(key, range: range) }
    }
}

extension Flag where Value == Double? {
    /// A number of seconds above 0 and at most a year.
    static func seconds(_ names: String..., value: String = "SECONDS", help: String) -> Flag {
        Flag(OptionSpec(names: names, value: value, help: help)) { arguments, key in try arguments.seconds(key) }
    }
}

extension Flag where Value == Int64? {
    /// A size like 500K, 10M or 1G, above 0.
    static func byteSize(_ names: String..., value: String, help: String) -> Flag {
        Flag(OptionSpec(names: names, value: value, help: help)) { arguments, key in try arguments.byteSize(key) }
    }
}

/// The options every command takes.
enum StandardFlags {
    static let help = Flag.presence("-h", "--help", help: "show this help")
}

extension ParsedArguments {
    /// The value of a flag whose value needs no check: given or not, as given, every one.
    subscript(flag: Flag<Bool>) -> Bool { has(flag.name) }
    subscript(flag: Flag<String?>) -> String? { value(flag.name) }
    subscript(flag: Flag<[String]>) -> [String] { all(flag.name) }

    /// `flag`'s value, checked (a number in its range, a size, seconds).
    func read<Value>(_ flag: Flag<Value>) throws -> Value { try flag.read(self) }

    /// Whether `flag` was given at all, whatever its value.
    func given<Value>(_ flag: Flag<Value>) -> Bool { has(flag.name) }

    /// Whether the option `spec` describes was given (for a list of options one check applies to).
    func given(_ spec: OptionSpec) -> Bool { has(spec.key) }

    /// `-h`, `--help`.
    var wantsHelp: Bool { self[StandardFlags.help] }
}

/// A command's options, typed: a view of its parsed command line whose fields read the
/// command's `Flag`s. A checked value (a number, a size, seconds) is checked when it is read,
/// where the command uses it, so a flag a command takes and has no use for is never refused.
protocol TypedOptions {
    var arguments: ParsedArguments { get }
}

extension TypedOptions {
    /// The arguments that are not options.
    var positionals: [String] { arguments.positionals }

    /// Whether the option `spec` describes was given, whatever its value (a list of options one check applies to).
    func given(_ spec: OptionSpec) -> Bool { arguments.given(spec) }

    /// Whether `flag` was given, whatever its value.
    func given<Value>(_ flag: Flag<Value>) -> Bool { arguments.given(flag) }
}
