package dev.silt.javaclient;

import java.util.Map;

/**
 * A scenario that runs over one connection of the client: the harness connects with {@link
 * #clientOptions()}, runs the scenario and closes the connection, whether the scenario passed or
 * threw.
 */
interface ConnectedScenario extends Scenario {
    /** The client options this scenario overrides; none unless it says otherwise. */
    default Map<String, String> clientOptions() {
        return Map.of();
    }

    /** Runs the scenario over {@code client} and summarises it in one line. */
    String run(Client client) throws Exception;

    @Override
    default String run(String bootstrap) throws Exception {
        try (Client client = Client.connect(bootstrap, clientOptions())) {
            return run(client);
        }
    }
}
