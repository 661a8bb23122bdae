package version

// IndexServer indexes BIOSVersions by the server they name.
const IndexServer = "spec.serverRef.name"

const kindBIOS = "BIOSVersion"
