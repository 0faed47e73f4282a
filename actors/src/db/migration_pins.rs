//! The checksums of the released migrations, pinned. sqlx stores each
//! applied migration's version, description and checksum (the SHA-384 of
//! its SQL text) and refuses to run on a database where an applied
//! migration's checksum no longer matches the binary's: editing a released
//! migration, even a comment or a line ending, breaks every installation
//! migrated before. These rows were computed from the files as released;
//! a migration whose text changed fails here, naming it.
//!
//! A new migration is pinned when it lands: the test names the row to add.

use super::migrations;

/// `(version, description, SHA-384 of the SQLite SQL, of the PostgreSQL
/// SQL)`: equal for a shared migration (`migrations/VERSION_..sql`),
/// different for a pair (`migrations/{sqlite,postgres}/VERSION_..sql`).
const PINNED: &[(i64, &str, &str, &str)] = &[
    (
        1,
        "init",
        "0e6644eaab4321777a2cbb0468f58c84dc732fa22bdf0d52c56f87f01b34b2fae0cf108f311a1556b99bf2bbf6b16d46",
        "cb3c4f1c5af0a23d70d251f29ad2329f3c23d949be9360ac895c63f1800caf0acbf10d0dd58c1eb5cfb3a61b65e567bc",
    ),
    (
        2,
        "image volumes",
        "4b7545ff9e951844f5ccec8f0b7830936e20af9b1928dc684bf2dba993e937d89d4c192ae94941d6b3ae93f6edb5316e",
        "4b7545ff9e951844f5ccec8f0b7830936e20af9b1928dc684bf2dba993e937d89d4c192ae94941d6b3ae93f6edb5316e",
    ),
    (
        3,
        "artifact digest",
        "6bb371921cdd63b13a4fd8c6e10d19462155d51fc95b8a35cf3090365562fc77b25fe39a8bcd05db4a28eba4cb0a2687",
        "6bb371921cdd63b13a4fd8c6e10d19462155d51fc95b8a35cf3090365562fc77b25fe39a8bcd05db4a28eba4cb0a2687",
    ),
    (
        4,
        "build owner",
        "87db64f0158bbe0ab131adcfed16ccdaee2717bcd02a650545366889b05661754fc0cf49e66ac0973bdddee1f64b3f9f",
        "87db64f0158bbe0ab131adcfed16ccdaee2717bcd02a650545366889b05661754fc0cf49e66ac0973bdddee1f64b3f9f",
    ),
    (
        5,
        "task caches",
        "0eda16220e2dd056a1e9dd6d27535e720d75891d500155135b8592370fcdc7539fb0cf6543faa4fecdd9f33d6e1a31c0",
        "0eda16220e2dd056a1e9dd6d27535e720d75891d500155135b8592370fcdc7539fb0cf6543faa4fecdd9f33d6e1a31c0",
    ),
    (
        6,
        "resources",
        "dad6d31c5677315784d0f895d47aa582ee939af6c088d7588e4ecdb11046e004daddebea1e662226071dfdcfdff3750a",
        "7a35219c67996849c5ba0c418ffc35f6c82891a07c43fde9600114894734a19033619dba39b531b23ac260adbbf5727f",
    ),
    (
        7,
        "artifacts on workers",
        "5e4d051e6efa58509dbb3aab0554fd40f32e302af3798c2b4558657059db14f9e1e9d2992252a91ea3560d8940c60484",
        "5e4d051e6efa58509dbb3aab0554fd40f32e302af3798c2b4558657059db14f9e1e9d2992252a91ea3560d8940c60484",
    ),
    (
        8,
        "gc",
        "c910a9a88324061122a53a14d35dba1a6de0a0aeeadfcee767faac8e9a1db48149d18d4955d937a3f2b8f2918fcfbe04",
        "c910a9a88324061122a53a14d35dba1a6de0a0aeeadfcee767faac8e9a1db48149d18d4955d937a3f2b8f2918fcfbe04",
    ),
    (
        9,
        "gc sweep",
        "7aa386d4e2844871017ba321ef716e773667d70c81d2942a62f810cbeaf26fe52f1522737bb9931ab78de412e498bd4f",
        "7aa386d4e2844871017ba321ef716e773667d70c81d2942a62f810cbeaf26fe52f1522737bb9931ab78de412e498bd4f",
    ),
    (
        10,
        "collect",
        "6b7bfccc510e6654d558f7ab89980eb69be7d19ff658ea04bd80911a36ea33e6f0af3ecc509e06cd13870cd499beab96",
        "1add9c6feaa6e946e8b181cada507749ddda5f12946a4cb02f3509dad3415d3dce1a8c5346a83fb6dce79a6f889ae47b",
    ),
    (
        11,
        "task cache leftovers",
        "53f79bcb42d04554762d4941e3b6e972f733bc5c9d21ba0db9c61a8dc0afe3e8be7438beeaabefd7d56492a1c5d73223",
        "53f79bcb42d04554762d4941e3b6e972f733bc5c9d21ba0db9c61a8dc0afe3e8be7438beeaabefd7d56492a1c5d73223",
    ),
    (
        12,
        "api tokens",
        "619da461aff19c8da9f686c4f3cb134c15a3226ce2517c09693b2100e764a593f868cdb061521c5142e1937297f27495",
        "619da461aff19c8da9f686c4f3cb134c15a3226ce2517c09693b2100e764a593f868cdb061521c5142e1937297f27495",
    ),
    (
        13,
        "web nodes",
        "a0541aa890c1dc7c8b0dd7e80be320534a40d5b5264dd7aad32519300707b3579766c940de6503d6b7c0446c4576b1f2",
        "36469ec473e526437f6f104b10df4efb0cb005fcd9fdc69ebd97e4ba9c834a62951c959558b9cc9a631020a5b0499e41",
    ),
    (
        14,
        "shared node state",
        "522f27d0beebeb76bf4de77864d990b20b39a8000ab1d8a3e49df63f89b4d595f5137a28a6af3a735f15de4c7dc7e4de",
        "522f27d0beebeb76bf4de77864d990b20b39a8000ab1d8a3e49df63f89b4d595f5137a28a6af3a735f15de4c7dc7e4de",
    ),
    (
        15,
        "team build allowance",
        "350b1c84c09ad09df7fb227248af5d15ba6019beb808f833de0de3d6ba24fa6c3e53d8e35c2cb8345e7f666f6626534f",
        "577bb4d887d07f03e1d2618ad2b85fed1e6cbd915f90d56f5b02f540bb61c464f19ba5aca227cee1edbe5b59a32a7421",
    ),
    (
        16,
        "retired workers",
        "0ce1a3fb913f3b9ac75558c65fe8fc1f8b88d988787ac7c70ff4400bdb6b74b923e1aaf2e1a2ff2a261f2c6269470162",
        "0ce1a3fb913f3b9ac75558c65fe8fc1f8b88d988787ac7c70ff4400bdb6b74b923e1aaf2e1a2ff2a261f2c6269470162",
    ),
    (
        17,
        "web node timeout",
        "2dff3625532b31f8bcbfc7dc9989e007f0675bc62fc0b6b2e22f1372be9acab95cbf6b861631ed6bee31cf006bc07f92",
        "2dff3625532b31f8bcbfc7dc9989e007f0675bc62fc0b6b2e22f1372be9acab95cbf6b861631ed6bee31cf006bc07f92",
    ),
    (
        18,
        "build turns",
        "58dc7e6c5a99ca3c45cd81921bf94c0e072f3a489f7068ad27693ee7c0fe51dcf4c842e322bf43d396137e14228bed8b",
        "58dc7e6c5a99ca3c45cd81921bf94c0e072f3a489f7068ad27693ee7c0fe51dcf4c842e322bf43d396137e14228bed8b",
    ),
    (
        19,
        "final events",
        "101d41565b74ee162e662e3ad729439efc90f21c0a80dbbe490b89661db26de50bb2d3e93fcb9580fccb739e356f20aa",
        "d894c266b8d15cfc3da29668c2e557a424295107797355ecb1e423a888f9b8189b3918e5661e16b0829d4cecd4b21f90",
    ),
    (
        20,
        "plan nodes",
        "146290809dbfce77ca312cc7053f6fd51df40e5823cdcd98ed5fedb76989bb4b85b61186ee6ad3695e0dcb99f8a215af",
        "146290809dbfce77ca312cc7053f6fd51df40e5823cdcd98ed5fedb76989bb4b85b61186ee6ad3695e0dcb99f8a215af",
    ),
    (
        21,
        "pipelines",
        "b64aea66f95fa6f70efae6d394ecfdfd0f1701c4986dc004b97c2bb5f7fc5725537a16c29c305e0bdda3a0df0f1233ea",
        "7b23be909c95d0972fe4bafa63149be409d98a885ae176d3a028e7c10cfb38bba27d5f894f9d28854be2af44c13c6762",
    ),
    (
        22,
        "waiting steps",
        "32f1a5c4e88efa698ac90468336f49ee1bf707b0a5bea97abb9a211953395448d76d313a7b887825b2eb1c7cc7e09f79",
        "32f1a5c4e88efa698ac90468336f49ee1bf707b0a5bea97abb9a211953395448d76d313a7b887825b2eb1c7cc7e09f79",
    ),
    (
        23,
        "ephemeral workers",
        "46aed4ad2802a488091dbd831efdde5c88f201c33584ad60c783c452c9edc07b3a936bc149ef16159d0acbc590a6054c",
        "46aed4ad2802a488091dbd831efdde5c88f201c33584ad60c783c452c9edc07b3a936bc149ef16159d0acbc590a6054c",
    ),
    (
        24,
        "team scopes",
        "97dbf90d5252f02f4b45e48877df518156e42537696b9cd16284a8d86d0e3adcce98f723b611d518abd8d106f83438b6",
        "97dbf90d5252f02f4b45e48877df518156e42537696b9cd16284a8d86d0e3adcce98f723b611d518abd8d106f83438b6",
    ),
    (
        25,
        "worker identity",
        "f1f4e02d5cbbbb7909fdb3b77938cb015aa0fe593f450359fd29215958f4fd130e4d359da35ab10cde356e2b006dca9a",
        "f1f4e02d5cbbbb7909fdb3b77938cb015aa0fe593f450359fd29215958f4fd130e4d359da35ab10cde356e2b006dca9a",
    ),
    (
        26,
        "artifact store written",
        "acb60a228487248effc06f4d0384b26832f2b16feb6db77459dd0c4193535e35ad735bb3a1ed9979d9dd87c566fee9ba",
        "acb60a228487248effc06f4d0384b26832f2b16feb6db77459dd0c4193535e35ad735bb3a1ed9979d9dd87c566fee9ba",
    ),
    (
        27,
        "archived pipelines",
        "149d6dcbd68a7fa6eef7a20beded5b235f466e1f4448549c51eefead1a5dd3a436ffb042b0ca0691fb1ed1434ee4440b",
        "149d6dcbd68a7fa6eef7a20beded5b235f466e1f4448549c51eefead1a5dd3a436ffb042b0ca0691fb1ed1434ee4440b",
    ),
    (
        28,
        "instanced pipelines",
        "4e3a1f34b373f36522fd32c58fcdd13d3e460a8157669a7108a157fe1f2cda7efe1179eeadf9dff9ca3869d090654d3b",
        "4e3a1f34b373f36522fd32c58fcdd13d3e460a8157669a7108a157fe1f2cda7efe1179eeadf9dff9ca3869d090654d3b",
    ),
    (
        29,
        "pins and manual checks",
        "ee91813f8941647fc31dc175d1341595baf67f7baf62870cf01044aecaf79e2a828c7a35d97b43b4677ab28bc8e61c1e",
        "ee91813f8941647fc31dc175d1341595baf67f7baf62870cf01044aecaf79e2a828c7a35d97b43b4677ab28bc8e61c1e",
    ),
    (
        30,
        "reruns",
        "bcfd9e9a3a31d73b5d5db94979b6ebba58a7bf3867fcfc262f77917e10b9ce030c969f8295da2faece197472c8855e30",
        "bcfd9e9a3a31d73b5d5db94979b6ebba58a7bf3867fcfc262f77917e10b9ce030c969f8295da2faece197472c8855e30",
    ),
    (
        31,
        "sealed at rest",
        "e63724dd5792a74564d5169ecd2709316c7f8009fefff67814d52fe217feb1255d6d2f6398fdfae8d4f4d490a53dc181",
        "e63724dd5792a74564d5169ecd2709316c7f8009fefff67814d52fe217feb1255d6d2f6398fdfae8d4f4d490a53dc181",
    ),
    (
        32,
        "build log reaped",
        "0e087df956330dcc1404fca2886cc446bb289d4479c90f7da6fe49f26342e07be897d82c1428fe54b701e6e1503cfe51",
        "0e087df956330dcc1404fca2886cc446bb289d4479c90f7da6fe49f26342e07be897d82c1428fe54b701e6e1503cfe51",
    ),
    (
        33,
        "secrets",
        "bc8440fc4f3931c7808e9a02f0fe6a42055b3b0802e7d78411af2d34e5a6ed42ad5f44141bd30c43f9f7270565762d92",
        "1ede4baf05cb572259758ef5229e5e09bc69a9dd935311e4af53f31083cc4e3ffc05d71961bb64b28f28e579e941d742",
    ),
    (
        34,
        "signing keys",
        "3dd55461497060992e85821905a2899fdcfaae68eb546742ebaa460b24c930bc88b419aff14ccf86f71edc7103e2596a",
        "d6e6b1ab67e28a6088cc5f111213516df4caa2cb101e21f1a25e2c33909b4f7189be29f4b1b2109e14bda19d5d6cdac8",
    ),
    (
        35,
        "build log store",
        "f42a6c33297fcc3de117c8018ffa885a6598f665b264806f8395e8d86c938bf5607f138cc3ad5a8c13f8db8a39f253d4",
        "f42a6c33297fcc3de117c8018ffa885a6598f665b264806f8395e8d86c938bf5607f138cc3ad5a8c13f8db8a39f253d4",
    ),
    (
        36,
        "token roles",
        "c342ff5fdafc720094d958981fd6b2c43b738d0679f4c08a1b9c7a37636d02744d2f20a6012b011f8721caa11e2616f9",
        "c342ff5fdafc720094d958981fd6b2c43b738d0679f4c08a1b9c7a37636d02744d2f20a6012b011f8721caa11e2616f9",
    ),
    (
        37,
        "audit log",
        "ccd46905ddd600ec98d0fb24685468bd587ec6b55be21c09faf1e794e48b45f77a1e9e5e4e342585be385ce564196a68",
        "810362d1c2d3c8ae3fa3dc4cfc7bdc273a9c5fbcd66617227a2ba379aef4a3cf4f1f0be2aae74f404a0684393215a273",
    ),
    (
        38,
        "people",
        "fedc15ecc00f8de9e3c3be89f7483f40e8f5d718a397b1d2778811563765df3a898ba31d47c5938f1591b46e8d709b72",
        "fedc15ecc00f8de9e3c3be89f7483f40e8f5d718a397b1d2778811563765df3a898ba31d47c5938f1591b46e8d709b72",
    ),
    (
        39,
        "build people",
        "f81fdb22993bf9a85ab02d0efdd9e7c3c33008961dff5fda9733ceead7f4bb911a416f290f9f412813ed3901cb5a7826",
        "f81fdb22993bf9a85ab02d0efdd9e7c3c33008961dff5fda9733ceead7f4bb911a416f290f9f412813ed3901cb5a7826",
    ),
    (
        40,
        "provider sign ins",
        "dfe92e176abad5fc8c7b42ad8ae65586a0feff8b5ebb541290023d9f8ea75eb0a7a25c709f7b563f4d0010481389803e",
        "dfe92e176abad5fc8c7b42ad8ae65586a0feff8b5ebb541290023d9f8ea75eb0a7a25c709f7b563f4d0010481389803e",
    ),
    (
        41,
        "drop provider sign ins",
        "d006ff6fcc69c28491c1135ff31c01287d7c5689818832a9248153a67ca1ce9d94cb9d7bd3edda1c26ce1f33c6218350",
        "d006ff6fcc69c28491c1135ff31c01287d7c5689818832a9248153a67ca1ce9d94cb9d7bd3edda1c26ce1f33c6218350",
    ),
    (
        42,
        "public pipelines",
        "513d924c04cb8d43cd3798d9fbe3daea8c62f3b9bfc34b623000371e4364176b53580ca240d771e30a81ade30e32094e",
        "513d924c04cb8d43cd3798d9fbe3daea8c62f3b9bfc34b623000371e4364176b53580ca240d771e30a81ade30e32094e",
    ),
    (
        43,
        "pipeline ordering",
        "81ddba495d3a8ae675030229f7a12753f3be9e280a888d2ae00ade757f8625186f0635b4d42673ccfe1b87335f6d9a72",
        "81ddba495d3a8ae675030229f7a12753f3be9e280a888d2ae00ade757f8625186f0635b4d42673ccfe1b87335f6d9a72",
    ),
    (
        44,
        "build start time",
        "05d9f85cee7853ac2320b08e9121e216b86c676bba989aa7596aa4e6b547687a7ccf24232ff5a25b6247993cfc8eef30",
        "05d9f85cee7853ac2320b08e9121e216b86c676bba989aa7596aa4e6b547687a7ccf24232ff5a25b6247993cfc8eef30",
    ),
    (
        45,
        "job ids",
        "7b4be93b8e5e17b30f596e6dbda85b4575c907017721b0fb8bcad6be064e46ffb34cc849e226efc6d32903168df62998",
        "11749569a1af2d396b19da05632616d0115c6f25c3db6a7083a4146c8987a53a919f2b5603a05c1bf9d2b617d7a17573",
    ),
    (
        46,
        "artifact int ids",
        "1ed04ac1bd019e35d27f092bc41946de65cec1fea909ea85cb83189d2a97d4622a64d4a95f685cb9a66007e7cd1e1488",
        "5be31d1d8812dfee0adfd8becafd58563df7361ad7d946321d8d329d0f55f8126c0f4d156d5be1ab934f5ad2ebdecd77",
    ),
    (
        47,
        "resource cache config",
        "5561d1c793127e29dbd2d5574cead40102a8f8be660af5e50655f8f4aea0ffba5a054cb7b927a15585f3754829ff061d",
        "5561d1c793127e29dbd2d5574cead40102a8f8be660af5e50655f8f4aea0ffba5a054cb7b927a15585f3754829ff061d",
    ),
];

/// A migration's checksum as hex.
fn hex(checksum: &[u8]) -> String {
    checksum.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test]
async fn every_migration_keeps_its_released_checksum_and_description() {
    let sqlite = migrations::sqlite().await.unwrap();
    let postgres = migrations::postgres().await.unwrap();
    let (sqlite, postgres) = (&sqlite.migrations, &postgres.migrations);
    assert_eq!(sqlite.len(), postgres.len());
    let mut unpinned = Vec::new();
    for (s, p) in sqlite.iter().zip(postgres.iter()) {
        assert_eq!((s.version, &s.description), (p.version, &p.description));
        let found = (
            s.version,
            s.description.to_string(),
            hex(&s.checksum),
            hex(&p.checksum),
        );
        match PINNED.iter().find(|pin| pin.0 == s.version) {
            Some(&(v, d, sh, ph)) => assert_eq!(
                found,
                (v, d.to_string(), sh.to_string(), ph.to_string()),
                "migration {v} changed since it was released: databases it ran on \
                 would refuse this binary (restore its text; change the schema \
                 in a new migration)"
            ),
            None => unpinned.push(format!("{found:?},")),
        }
    }
    for pin in PINNED {
        assert!(
            sqlite.iter().any(|m| m.version == pin.0),
            "migration {} ({}) is gone: databases it ran on would refuse this binary",
            pin.0,
            pin.1
        );
    }
    assert!(
        unpinned.is_empty(),
        "pin the new migrations (version, description, SQLite SHA-384, PostgreSQL SHA-384) \
         in PINNED:\n{}",
        unpinned.join("\n")
    );
}
