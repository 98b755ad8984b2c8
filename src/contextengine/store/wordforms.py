"""Irregular English word forms, for query rewriting: "buy" also finds "bought".

Porter's stemmer (the index's) joins regular forms ("paint", "painted",
"painting") but not irregular ones: a question in the present ("when did she
buy it?") misses the answer in the past ("I bought it"). :func:`variants`
gives the other forms of a word; :func:`~contextengine.store.search.parse_query`
adds them to a text query as extra terms, after the query's own. The list is
general English (common irregular verbs and plurals), nothing of any data set.
"""

from __future__ import annotations

__all__ = ["variants"]

_GROUPS = """
arise arose arisen | awake awoke awoken | be was were been | bear bore born |
beat beaten | become became | begin began begun | bend bent | bet | bid | bind bound |
bite bit bitten | bleed bled | blow blew blown | break broke broken | breed bred |
bring brought | build built | burn burnt | burst | buy bought | catch caught |
choose chose chosen | cling clung | come came | cost | creep crept | cut | deal dealt |
dig dug | do did done | draw drew drawn | dream dreamt | drink drank drunk |
drive drove driven | eat ate eaten | fall fell fallen | feed fed | feel felt |
fight fought | find found | flee fled | fly flew flown | forbid forbade forbidden |
forget forgot forgotten | forgive forgave forgiven | freeze froze frozen |
get got gotten | give gave given | go went gone | grind ground | grow grew grown |
hang hung | have had | hear heard | hide hid hidden | hit | hold held | hurt |
keep kept | kneel knelt | know knew known | lay laid | lead led | lean leant |
leap leapt | learn learnt | leave left | lend lent | let | lie lay lain | light lit |
lose lost | make made | mean meant | meet met | pay paid | put | quit | read |
ride rode ridden | ring rang rung | rise rose risen | run ran | say said |
see saw seen | seek sought | sell sold | send sent | set | shake shook shaken |
shine shone | shoot shot | show shown | shrink shrank shrunk | shut | sing sang sung |
sink sank sunk | sit sat | sleep slept | slide slid | speak spoke spoken | speed sped |
spend spent | spin spun | split | spread | spring sprang sprung | stand stood |
steal stole stolen | stick stuck | sting stung | stink stank stunk | strike struck |
swear swore sworn | sweep swept | swim swam swum | swing swung | take took taken |
teach taught | tear tore torn | tell told | think thought | throw threw thrown |
understand understood | wake woke woken | wear wore worn | weave wove woven |
weep wept | win won | wind wound | write wrote written | child children |
person people | man men | woman women | mouse mice | foot feet | tooth teeth
"""

_FORMS: dict[str, tuple[str, ...]] = {}
for _group in _GROUPS.split("|"):
    _words = _group.split()
    for _word in _words:
        _FORMS[_word] = tuple(
            dict.fromkeys([*_FORMS.get(_word, ()), *(w for w in _words if w != _word)])
        )


def variants(word: str) -> tuple[str, ...]:
    """The other forms of ``word`` (lower case), in the table's order; () when it has none."""
    return _FORMS.get(word, ())
