import Foundation
import PackagePlugin

/// Gives the `tether` executable its version (`tether --version`) from
/// packaging/version.sh, the script the Debian package takes its version
/// from, so that the two always agree: the file VERSION, and git (or, in a
/// tree from `git archive`, packaging/archive-info) for the commit.
///
/// A prebuild command, run before every build: a new commit changes the
/// version without changing any file the build sees. The script rewrites the
/// generated source only when the version changed, so an unchanged version
/// recompiles nothing.
@main
struct TetherVersion: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: Target) throws -> [Command] {
        let output = context.pluginWorkDirectoryURL.appending(path: "generated")
        let script = context.package.directoryURL.appending(path: "packaging/version.sh")
        return [
            .prebuildCommand(
                displayName: "Tether's version (packaging/version.sh)",
                executable: URL(filePath: "/bin/sh"),
                arguments: [script.path, "--swift", output.appending(path: "TetherVersion.swift").path],
                outputFilesDirectory: output
            )
        ]
    }
}
