import ArgumentParser
import CommandLineArguments
import Configuration
import Dispatch
import DurationUnits
import FoundationEssentials
import PayloadLayout
import Readings

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

struct ReadingsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "readings",
        abstract: "Print the logged readings as JSON Lines, oldest first; --follow keeps printing new ones.",
        discussion: """
            Prints the records in the daemon's readings directory exactly as they are stored, one JSON \
            object a line (pipe it to jq), oldest first: readings and the "source":"gap" records that \
            mark readings lost while the disk refused writes. A last line the daemon is still writing \
            is not printed. The directory is --directory, or readings.directory from the config \
            (--config, default /etc/tether/tether.toml, or /etc/tether/NAME.toml with --instance). \
            Reading it needs root or membership in the group that owns it (tether).

            --since 10m prints only records from the last ten minutes (units as in the config: ms, s, \
            m, h). --follow then keeps printing records as the daemon writes them, across file \
            rotation, like tail -F, until Ctrl-C or SIGTERM.

            --redate adds "ts_redated" to each record taken while the system clock was not yet \
            synchronised (its "clock_synced" is false) whose boot has a synchronised record: the \
            boot's start by that record ("ts" minus "boot_ms") plus the record's own "boot_ms" \
            (docs/operations.md, "Dating readings"). Other records are printed as stored. It reads \
            the records twice, so it cannot be combined with --follow.

            When the config declares the payload ([decode], see tether.toml(5)), each reading it             fits gets "fields", its named values, beside "hex" (never instead); a payload that does             not fit is printed with its hex alone and counted on standard error at the end. --raw             prints the records exactly as stored. With --directory the config is read for [decode]             only if --config is given.

            Exit status: 0 when done (also when stopped by a signal or when the reader of the output \
            goes away, as with head); 66 if the readings directory does not exist or cannot be read; \
            74 if reading fails or the output cannot be written; 78 if the config cannot be read or \
            is invalid.
            """
    )

    @OptionGroup var instanceOptions: InstanceOptions

    @Option(name: .shortAndLong, help: "The config file naming the readings directory (default: the instance's).")
    var config: String?

    @Option(help: ArgumentHelp("Read this readings directory; the config is then not read.", valueName: "dir"))
    var directory: String?

    @Option(help: ArgumentHelp("Only records from this long ago or later, e.g. 30s, 10m, 2h.", valueName: "duration"))
    var since: DurationArgument?

    @Flag(name: .shortAndLong, help: "After the existing records, keep printing new ones as they are written.")
    var follow = false

    @Flag(help: "Add \"ts_redated\", the true time, to records taken before the clock was synchronised.")
    var redate = false

    @Flag(help: "Print the records exactly as stored, without the \"fields\" the config's [decode] declares.")
    var raw = false

    func validate() throws {
        if redate, follow {
            throw ValidationError("--redate reads every record of a boot before printing one; it cannot be combined with --follow")
        }
    }

    /// sysexits.h
    enum Exit {
        static let noInput: Int32 = 66  // EX_NOINPUT
        static let ioError: Int32 = 74  // EX_IOERR
        static let config: Int32 = 78  // EX_CONFIG
    }


    func run() throws {
        // A closed pipe (| head) is an EPIPE from write, handled as the end of the output.
        signal(SIGPIPE, SIG_IGN)
        let (directory, layout) = try readingsDirectory()
        let rendering = RecordRendering(layout: raw ? nil : layout)
        defer { rendering.reportUndecodable() }
        let cutoff = since.map { Date().addingTimeInterval(-Self.seconds($0.duration)) }
        let output = StandardOutput()

        if follow {
            let follower: ReadingLogFollower
            do {
                follower = try ReadingLogFollower(directory: directory, since: cutoff)
            } catch {
                throw Self.fail(error, reading: directory, opening: true)
            }
            let signals = [SIGINT, SIGTERM].map { number in
                signal(number, SIG_IGN)
                let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
                source.setEventHandler { follower.stop() }
                source.resume()
                return source
            }
            defer { signals.forEach { $0.cancel() } }
            do {
                try follower.run { try rendering.emit($0, to: output) }
            } catch is StandardOutput.Closed {
                return
            } catch {
                throw Self.fail(error, reading: directory, opening: false)
            }
        } else {
            let reader: ReadingLogReader
            do {
                reader = try ReadingLogReader(directory: directory, since: cutoff)
            } catch {
                throw Self.fail(error, reading: directory, opening: true)
            }
            do {
                if redate {
                    try printRedated(directory: directory, since: cutoff, first: reader, rendering: rendering, to: output)
                } else {
                    try reader.readAvailable { try rendering.emit($0, to: output) }
                }
            } catch is StandardOutput.Closed {
                return
            } catch {
                throw Self.fail(error, reading: directory, opening: false)
            }
        }
    }

    /// Two passes: the first learns each boot's start from its first
    /// synchronised record, the second prints every record, with
    /// `"ts_redated"` before the closing brace where the rule dates it.
    private func printRedated(
        directory: String, since cutoff: Date?, first: ReadingLogReader, rendering: RecordRendering, to output: StandardOutput
    ) throws {
        let decoder = JSONDecoder()
        var redating = ReadingRedating()
        _ = try first.readAvailable { batch in
            Self.lines(of: batch) { line in
                if let record = ReadingRecord.decode(line: line, using: decoder) { redating.learn(record) }
            }
        }
        let second = try ReadingLogReader(directory: directory, since: cutoff)
        _ = try second.readAvailable { batch in
            var out: [UInt8] = []
            out.reserveCapacity(batch.count + batch.count / 4)
            Self.lines(of: batch) { line in
                let rendered = rendering.render(line)
                if let record = ReadingRecord.decode(line: line, using: decoder), let redated = redating.redated(record),
                   rendered.last == UInt8(ascii: "}")
                {
                    out += rendered.dropLast()
                    out += Array(#","ts_redated":""#.utf8) + Array(redated.utf8) + Array("\"}".utf8)
                } else {
                    out += rendered
                }
                out.append(UInt8(ascii: "\n"))
            }
            try out.withUnsafeBytes { try output.emit($0) }
        }
    }

    /// Each newline-terminated line of `batch`, without its newline.
    static func lines(of batch: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer) throws -> Void) rethrows {
        var start = 0
        for index in batch.indices where batch[index] == UInt8(ascii: "\n") {
            try body(UnsafeRawBufferPointer(rebasing: batch[start..<index]))
            start = index + 1
        }
    }

    /// `--directory`, or the config's `readings.directory`; and the config's
    /// `[decode]`, when the config is read.
    private func readingsDirectory() throws -> (String, PayloadLayout?) {
        if let directory, config == nil { return (directory, nil) }
        let instanceName = try instanceOptions.resolved()
        let path = config ?? instanceName.configPath
        do {
            let loaded = try TetherConfig.load(path: path, instance: instanceName)
            return (directory ?? loaded.readings.directory, loaded.decode)
        } catch {
            Self.complain("\(error)\ntether: cannot tell where the readings are without the config; pass --directory DIR to read a readings directory directly")
            throw ExitCode(Exit.config)
        }
    }

    /// Reports `error` and returns the exit code: 66 when the directory (or a file in
    /// it) is missing or not readable to us, 74 for other failures.
    private static func fail(_ error: Error, reading directory: String, opening: Bool) -> ExitCode {
        if let error = error as? StandardOutput.Failure {
            complain("cannot write the output: \(String(cString: strerror(error.code)))")
            return ExitCode(Exit.ioError)
        }
        guard let error = error as? ReadingLogError else {
            complain("reading \(directory): \(error)")
            return ExitCode(Exit.ioError)
        }
        switch error.code {
        case ENOENT, ENOTDIR:
            complain(opening ? "no readings directory at \(directory): \(String(cString: strerror(error.code)))" : "\(error)")
            return ExitCode(Exit.noInput)
        case EACCES, EPERM:
            complain("\(error): run it as root or as a member of the group that owns \(directory)")
            return ExitCode(Exit.noInput)
        default:
            complain("\(error)")
            return ExitCode(Exit.ioError)
        }
    }

    private static func complain(_ message: String) {
        StandardError.emit("tether: \(message)\n")
    }

    private static func seconds(_ duration: Duration) -> TimeInterval {
        duration.inSeconds
    }
}

/// Writes batches straight to file descriptor 1 with write(2): one call a batch, no
/// buffering in between, so a follower's reader sees each batch at once.
struct StandardOutput {
    /// The reader went away (EPIPE): not an error for a printing command.
    struct Closed: Error {}
    struct Failure: Error {
        var code: Int32
    }

    func emit(_ bytes: UnsafeRawBufferPointer) throws {
        guard let base = bytes.baseAddress else { return }
        var offset = 0
        while offset < bytes.count {
            let result = write(STDOUT_FILENO, base + offset, bytes.count - offset)
            if result > 0 {
                offset += result
            } else if result < 0, errno == EINTR {
                continue
            } else if result < 0, errno == EPIPE {
                throw Closed()
            } else {
                throw Failure(code: result < 0 ? errno : EIO)
            }
        }
    }
}
