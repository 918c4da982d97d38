import ArgumentParser
import CommandLineArguments
import ControlAPI

struct RebindCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rebind",
        abstract: "Forget the dongle this gateway is bound to, and bind anew.",
        discussion: """
            A config that finds the dongle by dongle.name_prefix or dongle.service_uuid binds the gateway to \
            the first dongle that comes online (its address is kept in the readings directory, \
            dongle-binding), and from then on Tether connects to no other device, however strong: an \
            identical dongle of another vehicle matches the config just as well. After replacing the \
            dongle, rebind: Tether forgets the binding, reconnects, and binds to the first matching dongle \
            that comes online (connected, else the strongest signal). `tether status` shows the binding. \
            Calls Rebind() on io.tether.Tether1: only root and members of group 'tether-admin' may, and it \
            counts against Reconnect's limit (3 in any 30 s). A config with dongle.address has nothing to \
            rebind: change the address. Exit status: 0 done, 1 failed, 3 daemon not running, 4 permission denied.
            """
    )

    @OptionGroup var instanceOptions: InstanceOptions

    func run() async throws {
        let instance = try instanceOptions.resolved()
        let client = await ControlConnection.connect(instance)
        do {
            print(try await client.rebind())
        } catch {
            ControlConnection.exit(error)
        }
    }
}
